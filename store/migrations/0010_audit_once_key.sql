-- A key that makes an audit row written at most once. The Record activity
-- writes a key workflow's audit rows (delivery.failed, delivery.cancelled,
-- ...) and with them the operational events derived from them
-- (herald.key.failed, herald.key.expired). When its worker dies after the
-- commit and before Temporal hears of it, Temporal runs it again: the key
-- (workflow run, activity id, position) then finds its row and the retry
-- writes neither the row nor the event a second time. NULL for every other
-- row; the index holds only keyed rows.
ALTER TABLE audit ADD COLUMN once_key text;
CREATE UNIQUE INDEX audit_once_key ON audit (once_key) WHERE once_key IS NOT NULL;
