-- When a key's held rows last changed: the relay's re-drive looks for keys
-- whose rows have been quiet for a while (their workflow may be gone) with
-- one probe per key, never reading a key's rows one by one.
CREATE INDEX outcomes_held_updated ON outcomes (subscription_id, subject, updated_at)
    WHERE status IN ('queued', 'failed');
