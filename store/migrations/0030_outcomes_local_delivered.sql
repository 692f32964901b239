-- The rows a local execution delivered (delivered_by names it: the
-- workflow run and its head), by key in sequence order. A run whose
-- workflow task was lost after such an execution (its worker died before
-- the task completed) reads the rows above its cursor that its local
-- executions delivered (store.KeyQueue): the task that delivered them, and
-- the run's memory of them, are gone, and the relay may never name them in
-- a signal. One index entry per local delivery; built inside the
-- migration's transaction like 0028's: a SHARE lock on outcomes while it is
-- built (deliveries wait; on a large log run `starter migrate` in a quiet
-- hour).
CREATE INDEX outcomes_local_delivered ON outcomes (subscription_id, subject, event_seq)
    WHERE status = 'delivered' AND delivered_by IS NOT NULL;
