-- The W3C trace context of an event's publish span (issue 17): a JSON object
-- {"traceparent": "...", "tracestate": "..."} that the relay and the Deliver
-- activity continue the event's trace from. NULL when the event was
-- published without tracing.
ALTER TABLE events ADD COLUMN trace_context jsonb;
