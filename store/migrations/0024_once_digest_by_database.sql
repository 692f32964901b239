-- Audit once-keys that no runtime role can pre-empt (docs/design.md#audit).
-- Migration 0017 named a once-keyed row by (once_key, once_digest), but the
-- writer supplied the digest: any role that may insert into audit (the
-- runtime role) could plant a row of its own content under a key a workflow
-- was going to use, with the digest of the genuine row, and the genuine
-- write then took it for its own earlier commit and wrote nothing (neither
-- its row nor the key event derived from it). The digest is now the
-- database's: this trigger computes it from the row's own fields, whatever
-- the writer gave, so a planted row names only its own content and is no
-- obstacle to a row of any other. The runtime role does not own audit, so it
-- can neither drop nor disable the trigger. Rows written before keep the
-- digest their writer computed (an activity retried across this migration may
-- write its row a second time).
CREATE FUNCTION herald_audit_once_digest() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.once_key IS NULL THEN
        NEW.once_digest := NULL;
    ELSE
        NEW.once_digest := encode(sha256(convert_to(jsonb_build_array(
            NEW.action, NEW.outcome, NEW.actor, NEW.target_type, NEW.target_id,
            coalesce(NEW.error_code, ''), NEW.metadata)::text, 'UTF8')), 'hex');
    END IF;
    RETURN NEW;
END
$$;
ALTER FUNCTION herald_audit_once_digest() SET search_path = pg_catalog, pg_temp;
CREATE TRIGGER audit_once_digest BEFORE INSERT ON audit
    FOR EACH ROW EXECUTE FUNCTION herald_audit_once_digest();
