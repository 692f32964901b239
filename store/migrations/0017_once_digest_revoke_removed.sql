-- Audit once-keys that no other writer can pre-empt (docs/design.md#the-audit-trail).
-- A once key used to name one row: a row planted under a key a workflow
-- was going to use made the genuine write fail and roll back its outcome
-- rows and key event. A key now names a row together with the digest of
-- its content (action, outcome, actor, target, error code, metadata): a
-- retry of the same write finds its row and writes nothing, while a row of
-- other content under the same key is no obstacle. Rows written before
-- keep a NULL digest and never conflict with new ones.
ALTER TABLE audit ADD COLUMN once_digest text;
DROP INDEX audit_once_key;
CREATE UNIQUE INDEX audit_once_key ON audit (once_key, once_digest) WHERE once_key IS NOT NULL;

-- Removing an app now revokes its tokens (docs/publishing.md#api-tokens);
-- the tokens of apps removed before are revoked here, and audited, so
-- applying such an app again does not bring them back.
WITH revoked AS (
    UPDATE api_tokens t SET revoked_at = now(), revoked_by = 'system'
      FROM apps a
     WHERE a.id = t.app AND a.removed_at IS NOT NULL AND t.revoked_at IS NULL
    RETURNING t.id, t.app, t.name
)
INSERT INTO audit (action, outcome, actor, target_type, target_id, metadata)
SELECT 'api_token.revoked', 'allowed', 'system', 'app', app,
       jsonb_build_object('tokenId', id, 'name', name, 'reason', 'app removed')
  FROM revoked;
