-- starter status totals the rejected events per source app
-- (docs/design.md#command-line). Without an index it reads the whole event
-- log (350 ms for 1.1 million events on the test machine); this one answers
-- from the index alone (40 ms), since a rejected row is never updated. It
-- is built in the migration's transaction: publishers wait for the build
-- (about 0.7 s per million events), readers and the relay do not.
CREATE INDEX events_rejected_app ON events (source_app, received_at) WHERE state = 'rejected';
