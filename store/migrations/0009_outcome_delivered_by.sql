-- The local execution (workflow run and head event) whose Deliver delivered
-- the event, when a local activity did. A first attempt runs as a local
-- activity; when its worker dies after the POST, the workflow task runs it
-- again with no record of the first, and this column tells it that the
-- event was delivered by that same execution (counted once), not re-sent
-- from before (already counted).
ALTER TABLE outcomes ADD COLUMN delivered_by text;
