package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A publisher role is the PostgreSQL role an app's own database code logs in
// as to publish with publish.PublishTx (docs/publishing.md#a-publisher-role-per-app).
// It has no right on Herald's tables: it may run the functions of migration
// 0018, which run as the owner role and publish for the app that
// publisher_roles maps the session's login role to, never for an app named
// by an argument.

// publisherFunctions are the functions a publisher role may run, as GRANT
// names them.
var publisherFunctions = []string{
	"herald_publisher_app()",
	"herald_publisher_declaration(text, integer)",
	"herald_publish(uuid[], text[], integer[], text[], integer[], bytea[], text[], text[], text[], jsonb[])",
	publishFastFunction,
	"herald_publisher_reject(uuid, text, integer, text, text, text, text, text)",
}

// PublisherGrants returns the statements that make role a publisher role of
// app in schema: USAGE on the schema, EXECUTE on the publisher functions,
// and the row of publisher_roles. Run them as the owner role;
// docs/publishing.md shows them.
func PublisherGrants(schema, app, role string) []string {
	sch, r := pgx.Identifier{schema}.Sanitize(), pgx.Identifier{role}.Sanitize()
	stmts := []string{"GRANT USAGE ON SCHEMA " + sch + " TO " + r}
	for _, fn := range publisherFunctions {
		stmts = append(stmts, "GRANT EXECUTE ON FUNCTION "+sch+"."+fn+" TO "+r)
	}
	return append(stmts, "INSERT INTO "+sch+".publisher_roles (role, app) VALUES ("+quoteLiteral(role)+", "+quoteLiteral(app)+")"+
		" ON CONFLICT (role) DO UPDATE SET app = EXCLUDED.app, granted_at = now()")
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string {
	out := []byte{'\''}
	for i := 0; i < len(s); i++ {
		if s[i] == '\'' {
			out = append(out, '\'')
		}
		out = append(out, s[i])
	}
	return string(append(out, '\''))
}

// GrantPublisher makes role a publisher role of app (`starter db
// grant-publisher APP ROLE`), running PublisherGrants as the owner role, and
// audits it. The app must be applied and live; the role must exist and must
// not be the owner, a superuser, or own anything in the schema (as for
// GrantRuntime). Granting a role again moves it to app.
func (s *Store) GrantPublisher(ctx context.Context, app, role, actor string) error {
	if app == "" || role == "" || !queryableText(app) || !queryableText(role) {
		return errors.New("grant publisher role: an app and a role are required")
	}
	return s.WithTx(ctx, func(tx pgx.Tx) error {
		if err := checkRuntimeRole(ctx, tx, "grant publisher role", role); err != nil {
			return err
		}
		// A role that can write Herald's tables (the runtime role, or a
		// member of it) would not be confined by the mapping. A role that
		// may create objects in Herald's schema could plant a function
		// there that the publisher functions, run as the owner, would call
		// instead of a built-in (one matching a call's argument types more
		// closely): it would run as the owner. PostgreSQL 14 and before let
		// every role create in the schema public. Either right counts
		// through any role it is a member of: one that does not inherit
		// (NOINHERIT) has it once it runs SET ROLE, which it may.
		var writes, creates bool
		if err := tx.QueryRow(ctx, `SELECT coalesce(bool_or(has_table_privilege(g.oid, 'events', 'INSERT')
			                                 OR has_table_privilege(g.oid, 'api_tokens', 'INSERT')
			                                 OR has_table_privilege(g.oid, 'audit', 'INSERT')), false),
			       coalesce(bool_or(has_schema_privilege(g.oid, current_schema(), 'CREATE')), false)
			  FROM pg_roles g WHERE pg_has_role($1, g.oid, 'MEMBER')`, role).Scan(&writes, &creates); err != nil {
			return fmt.Errorf("grant publisher role: %w", err)
		}
		if writes {
			return fmt.Errorf("grant publisher role: %q can already write Herald's tables (the runtime role or a member of it); use a role of its own", role)
		}
		if creates {
			return fmt.Errorf("grant publisher role: %q may create objects in Herald's schema, and so run its own code as the owner "+
				"through the publisher functions; revoke that first (REVOKE CREATE ON SCHEMA <schema> FROM PUBLIC, %s)",
				role, pgx.Identifier{role}.Sanitize())
		}
		ok, err := AppExistsIn(ctx, tx, app)
		if err != nil {
			return fmt.Errorf("grant publisher role: %w", err)
		}
		if !ok {
			return fmt.Errorf("grant publisher role: app %s: %w", app, ErrNotFound)
		}
		var schema string
		if err := tx.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
			return fmt.Errorf("grant publisher role: %w", err)
		}
		for _, stmt := range PublisherGrants(schema, app, role) {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("grant publisher role %s: %s: %w", role, stmt, err)
			}
		}
		return AppendAudit(ctx, tx, AuditEntry{Action: ActionPublisherGranted, Actor: actor,
			TargetType: TargetApp, TargetID: app, Metadata: map[string]any{"role": role}})
	})
}

// ActionPublisherGranted records GrantPublisher.
const ActionPublisherGranted = "publisher_role.granted"

// ActionPublisherRevoked audits a publisher role's mapping dropped because
// its app was applied again after removal.
const ActionPublisherRevoked = "publisher_role.revoked"

// reappliedReason is the audit reason of what an app's removal leaves
// behind and its next apply ends.
const reappliedReason = "app applied again after removal"

// forgetRemovedApp ends, when a removed app is applied again, what its
// earlier life left that would otherwise come back with it: its publisher
// roles (their logins could publish as the app again) and its Standard
// Webhooks secrets (their holders could still verify and forge its
// deliveries); the app gets a new secret at once or before its first
// delivery. Its tokens were revoked at removal (revokeAppTokens).
func forgetRemovedApp(ctx context.Context, tx pgx.Tx, app, actor string) error {
	rows, err := tx.Query(ctx, `DELETE FROM publisher_roles WHERE app = $1 RETURNING role`, app)
	if err != nil {
		return fmt.Errorf("drop the publisher roles of removed app %s: %w", app, err)
	}
	roles, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("drop the publisher roles of removed app %s: %w", app, err)
	}
	for _, role := range roles {
		if err := AppendAudit(ctx, tx, AuditEntry{Action: ActionPublisherRevoked, Actor: actor,
			TargetType: TargetApp, TargetID: app, Metadata: map[string]any{"role": role, "reason": reappliedReason}}); err != nil {
			return err
		}
	}
	tag, err := tx.Exec(ctx, `UPDATE app_secrets SET valid_until = now()
		WHERE app = $1 AND (valid_until IS NULL OR valid_until > now())`, app)
	if err != nil {
		return fmt.Errorf("end the secrets of removed app %s: %w", app, err)
	}
	if tag.RowsAffected() > 0 {
		return AppendAudit(ctx, tx, AuditEntry{Action: ActionSecretRotated, Actor: actor, TargetType: TargetApp, TargetID: app,
			Metadata: map[string]any{"overlap": "0s", "reason": reappliedReason, "ended": tag.RowsAffected()}})
	}
	return nil
}

// PublisherApp is what herald_publisher_app() tells a session: the app its
// role publishes for, if any.
type PublisherApp struct {
	App  string
	Live bool // the app is applied and not removed
	OK   bool // the session's role is a publisher role
}

// PublisherAppIn asks q (a publisher's transaction) which app its role
// publishes for.
func PublisherAppIn(ctx context.Context, q Querier) (PublisherApp, error) {
	var p PublisherApp
	err := q.QueryRow(ctx, `SELECT app, live FROM herald_publisher_app()`).Scan(&p.App, &p.Live)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return PublisherApp{}, nil
	case err != nil:
		return PublisherApp{}, fmt.Errorf("look up the publisher role's app: %w", err)
	}
	p.OK = true
	return p, nil
}

// LookupPublisherDeclarationIn is LookupDeclarationIn for a publisher role:
// only its own app's declarations are found.
func LookupPublisherDeclarationIn(ctx context.Context, q Querier, typ string, version int) (DeclaredEvent, error) {
	return lookupDeclaration(ctx, q, `
		SELECT type, version, app, subject, data_schema, place, deprecated
		FROM herald_publisher_declaration($1, $2)`, typ, version)
}

// InsertPublisherEventsTx is InsertEventsTx for a publisher role, through
// herald_publish: the events are recorded as the role's app's whatever
// their SourceApp, with the same ordering-key locks, and an id another
// app's event holds is a Conflict. Whatever the number of events it is all
// or nothing, as InsertEventsTx is for several: herald_publish refuses by
// raising an error, which the call's savepoint takes back, leaving tx as it
// was before the call.
//
// One event, where the role may run herald_publish_fast (migration 0036),
// is first sent to that function alone, with no savepoint (a connection's
// first publish prepares the role's statements before, under a savepoint
// of its own, and asks whether it may: prepareUnderSavepoint): it
// inserts the event when herald_publish would have at once, and otherwise
// writes nothing, and the call goes on as above. A database error there (a
// lock not granted, a deadlock) aborts tx, as it does for one event in
// Herald's role; a body jsonb may refuse goes the savepoint's way
// (jsonbMayRefuse).
func InsertPublisherEventsTx(ctx context.Context, tx pgx.Tx, evs []NewEvent) ([]InsertedEvent, error) {
	if len(evs) == 0 {
		return nil, nil
	}
	a, err := eventArraysOf(evs)
	if err != nil {
		return nil, err
	}
	pc := tx.Conn().PgConn()
	fast := len(evs) == 1 && !simpleProtocol(tx) && !jsonbMayRefuse(a.envelopes[0])
	if fast {
		// A connection's first publish prepares the statements, and asks
		// whether the role may run herald_publish_fast, before anything.
		if err := prepareUnderSavepoint(ctx, tx, roleStatements); err != nil {
			return nil, fmt.Errorf("insert events: %w", err)
		}
	}
	if fast && roleStatements.preparedWith(pc, stmtPublishFast) {
		var seq *int64
		if err := tx.QueryRow(ctx, stmtPublishFast.name, a.publishFastArgs()...).Scan(&seq); err != nil {
			if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && slices.Contains(fastGone, pgErr.Code) {
				// The next publish on this connection asks again.
				roleStatements.forget(pc)
			}
			return nil, fmt.Errorf("insert events: %w", err)
		}
		if seq != nil {
			return []InsertedEvent{{ID: a.ids[0], Seq: *seq}}, nil
		}
	}
	var out []InsertedEvent
	stmt := stmtPublishChecked
	if len(evs) == 1 {
		stmt = stmtPublishOne
	}
	queue := func(b *pgx.Batch, ref func(namedStatement) string) {
		b.Queue(ref(stmt), a.publishArgs()...)
	}
	err = underSavepoint(ctx, tx, roleStatements, queue, func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err == nil {
			out, err = readPublished(rows, a.ids)
		}
		return err
	})
	if raised(err, notAllInserted) && !errors.Is(err, errSavepointKept) {
		out, err = publishSlowly(ctx, tx, a)
	}
	if err != nil {
		return nil, fmt.Errorf("insert events: %w", err)
	}
	return out, nil
}

// The statements of a publisher role's publish: herald_publish, which
// refuses what the role may not publish by raising an error, and reports an
// id taken as out_duplicate (the same content) or out_conflict.
// InsertPublisherEventsTx sends heraldPublishChecked under a savepoint in
// one round trip once the connection has it prepared (underSavepoint): it
// raises notAllInserted when any event was not inserted, so that the
// savepoint takes back the others, and the call runs heraldPublish under a
// savepoint of its own to say which (publishSlowly). One event sends
// heraldPublish itself in that round trip: a taken id inserted nothing, so
// nothing is to be taken back and its row says which, and the key's lock
// is kept until the transaction ends, as for one event in Herald's role.
// That cost about 40 µs less of the backend's CPU a transaction than
// heraldPublishChecked (of about 310; one connection, alternating, at
// d3d75fd).
const (
	// publishCall is the call, with eventArrays.publishArgs.
	publishCall   = `herald_publish($1::uuid[], $2, $3, $4, $5, $6, $7, $8, $9, $10::text[]::jsonb[])`
	heraldPublish = `
		SELECT coalesce(out_seq, 0), out_duplicate, out_conflict FROM ` + publishCall
	heraldPublishChecked = `
		WITH r AS MATERIALIZED (
		  SELECT coalesce(out_seq, 0) AS seq, out_duplicate, out_conflict, n
		    FROM ` + publishCall + `
		         WITH ORDINALITY AS f(out_seq, out_duplicate, out_conflict, n))
		SELECT seq, out_duplicate, out_conflict
		  FROM r
		 WHERE (SELECT CASE WHEN bool_or(out_conflict OR out_duplicate)
		                    THEN ('` + notAllInserted + `: ' || count(*) FILTER (WHERE seq <> 0 AND NOT out_duplicate)
		                          || ' of ' || count(*))::integer
		                    ELSE 0 END
		          FROM r) = 0
		 ORDER BY n`
)

// fastGone are the SQLSTATEs with which herald_publish_fast fails when it
// is no longer there to run as prepared: its EXECUTE revoked (42501), the
// function gone (42883), the statement deallocated behind pgx (26000). The
// connection then forgets its statements and prepares them anew.
var fastGone = []string{"42501", "42883", "26000"}

// jsonbMayRefuse reports whether body may be refused by PostgreSQL's jsonb
// although the publisher accepted it: bytes that are not UTF-8, the escape
// \u0000, or a surrogate's escape (a valid pair is counted too).
// herald_publish_fast casts the body to jsonb outside any savepoint, where
// that refusal would abort the caller's transaction; such a body goes the
// savepoint's way, where herald_publish refuses it as before.
func jsonbMayRefuse(body []byte) bool {
	if !utf8.Valid(body) {
		return true
	}
	for rest := body; ; {
		i := bytes.Index(rest, []byte(`\u`))
		if i < 0 {
			return false
		}
		rest = rest[i+2:]
		if len(rest) >= 4 && (string(rest[:4]) == "0000" ||
			rest[0]|0x20 == 'd' && strings.IndexByte("89abcdefABCDEF", rest[1]) >= 0) {
			return true
		}
	}
}

// publishFastFunction is herald_publish_fast (migration 0036), as GRANT
// and to_regprocedure name it.
const publishFastFunction = "herald_publish_fast(uuid, text, integer, text, integer, bytea, text, jsonb)"

// heraldPublishFast is one event's call of herald_publish_fast, with
// eventArrays.publishFastArgs.
const heraldPublishFast = `SELECT herald_publish_fast($1::uuid, $2, $3, $4, $5, $6, $7, $8::text::jsonb)`

// publishSlowly is a publisher role's publish of a under a savepoint in
// round trips of its own (underOwnSavepoint), which tells duplicates from
// conflicts.
func publishSlowly(ctx context.Context, tx pgx.Tx, a eventArrays) ([]InsertedEvent, error) {
	return underOwnSavepoint(ctx, tx, func(sp pgx.Tx) ([]InsertedEvent, error) {
		rows, err := sp.Query(ctx, heraldPublish, a.publishArgs()...)
		if err != nil {
			return nil, err
		}
		return readPublished(rows, a.ids)
	})
}

// readPublished reads herald_publish's rows, one per id in order.
func readPublished(rows pgx.Rows, ids []string) ([]InsertedEvent, error) {
	defer rows.Close()
	out := make([]InsertedEvent, 0, len(ids))
	for rows.Next() {
		if len(out) == len(ids) {
			return nil, fmt.Errorf("more results than the %d events", len(ids))
		}
		e := InsertedEvent{ID: ids[len(out)]}
		if err := rows.Scan(&e.Seq, &e.Duplicate, &e.Conflict); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out) != len(ids) {
		return nil, fmt.Errorf("%d results for %d events", len(out), len(ids))
	}
	return out, nil
}

// RecordPublisherRejection is RecordRejection for a publisher role, through
// herald_publisher_reject: the rejection is recorded under the role's app
// whatever r.SourceApp says.
func RecordPublisherRejection(ctx context.Context, q Querier, r Rejection) error {
	f := r.storable()
	_, err := q.Exec(ctx, `SELECT herald_publisher_reject($1, $2, $3, $4, $5, $6, $7, $8)`,
		f.id, f.typ, f.version, f.subject, f.code, f.reason,
		storableText(r.Via, maxRejectedFieldBytes), storableText(r.Token, maxRejectedFieldBytes))
	if err != nil {
		return fmt.Errorf("record rejection %s: %w", r.Code, err)
	}
	return nil
}

// eventArrays are the columns of several events, as arrays: the parameters
// of herald_publish (eventArraysOf) and of insertEvents (eventColumns).
type eventArrays struct {
	ids, apps, types, subjects, hashes, vias, tokens []string
	versions, stripes                                []int32 // stripes: eventArraysOf only
	envelopes                                        [][]byte
	traces                                           []*string // JSON text, NULL for none
}

// eventArraysOf gives evs' columns as arrays, with their keys' stripes,
// for herald_publish: a version must be one a declaration may have.
func eventArraysOf(evs []NewEvent) (eventArrays, error) {
	for _, ev := range evs {
		if ev.Version < 1 || ev.Version > maxVersion {
			return eventArrays{}, fmt.Errorf("insert events: version %d of %s out of range", ev.Version, ev.Type)
		}
	}
	a, err := eventColumns(evs)
	if err != nil {
		return eventArrays{}, fmt.Errorf("insert events: %w", err)
	}
	a.stripes = make([]int32, len(evs))
	for i, ev := range evs {
		a.stripes[i] = keyStripe(ev.Subject)
	}
	return a, nil
}

// eventColumns gives evs' columns as arrays, stripes left out; a version
// must fit the column (int32).
func eventColumns(evs []NewEvent) (eventArrays, error) {
	n := len(evs)
	a := eventArrays{
		ids: make([]string, n), apps: make([]string, n), types: make([]string, n), subjects: make([]string, n),
		hashes: make([]string, n), vias: make([]string, n), tokens: make([]string, n),
		versions: make([]int32, n), envelopes: make([][]byte, n), traces: make([]*string, n),
	}
	for i, ev := range evs {
		if ev.Version < math.MinInt32 || ev.Version > math.MaxInt32 {
			return eventArrays{}, fmt.Errorf("event %s: version %d out of range", ev.ID, ev.Version)
		}
		a.ids[i], a.apps[i], a.types[i], a.subjects[i], a.hashes[i] = ev.ID, ev.SourceApp, ev.Type, ev.Subject, ev.ContentHash
		a.vias[i], a.tokens[i] = ev.Via, ev.Token
		a.versions[i] = int32(ev.Version)
		a.envelopes[i] = ev.Envelope
		if len(ev.TraceContext) > 0 {
			b, err := json.Marshal(map[string]string(ev.TraceContext))
			if err != nil {
				return eventArrays{}, fmt.Errorf("event %s: trace context: %w", ev.ID, err)
			}
			tc := string(b)
			a.traces[i] = &tc
		}
	}
	return a, nil
}

// publishArgs are a's arrays in the order of publishCall's parameters.
func (a eventArrays) publishArgs() []any {
	return []any{a.ids, a.types, a.versions, a.subjects, a.stripes, a.envelopes, a.hashes, a.vias, a.tokens, a.traces}
}

// publishFastArgs are the first event's columns in the order of
// heraldPublishFast's parameters.
func (a eventArrays) publishFastArgs() []any {
	return []any{a.ids[0], a.types[0], a.versions[0], a.subjects[0], a.stripes[0], a.envelopes[0], a.hashes[0], a.traces[0]}
}
