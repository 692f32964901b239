-- A subscription's own error policy (manifest subscribes[].onFailure and
-- maxAttempts, docs/design.md#error-policy): what its keys do with an event
-- that failed for good, and how many attempts an event gets (NULL: the
-- worker's retry schedule).
ALTER TABLE subscriptions
    ADD COLUMN on_failure text NOT NULL DEFAULT 'hold' CHECK (on_failure IN ('hold', 'skip')),
    ADD COLUMN max_attempts integer CHECK (max_attempts BETWEEN 1 AND 20);
