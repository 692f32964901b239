-- The Temporal run of the key's workflow whose Deliver execution delivered
-- the event. A first attempt runs as a local activity; when its worker dies
-- after the POST, the workflow task runs it again with no record of the
-- first, and this column tells it that the event was delivered by its own
-- run (counted once), not re-sent from before (already counted).
ALTER TABLE outcomes ADD COLUMN delivered_run text;
