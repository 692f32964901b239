package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"herald/manifest"
)

// ApplyResult reports what applying a manifest (or removing an app) changed.
type ApplyResult struct {
	App string `json:"app"`
	// Unchanged is true when the manifest's content hash matched the stored
	// one (or the app was already removed) and nothing was written.
	Unchanged bool `json:"unchanged"`

	DeclarationsAdded   int `json:"declarationsAdded"`
	DeclarationsUpdated int `json:"declarationsUpdated"`
	DeclarationsRetired int `json:"declarationsRetired"`
	// DeclarationsRestored counts retired declarations declared again. A
	// restored declaration whose content also changed counts as updated too.
	DeclarationsRestored int `json:"declarationsRestored"`

	SubscriptionsAdded     int `json:"subscriptionsAdded"`
	SubscriptionsRestored  int `json:"subscriptionsRestored"`
	SubscriptionsCancelled int `json:"subscriptionsCancelled"`

	// LimitsChanged: the app's delivery limits (manifest "limits") changed;
	// an app.limits_changed audit row says from what to what.
	LimitsChanged bool `json:"limitsChanged,omitempty"`
	// LimitsFrom and LimitsTo are the limits before and after, when changed.
	LimitsFrom *Limits `json:"limitsFrom,omitempty"`
	LimitsTo   *Limits `json:"limitsTo,omitempty"`

	// StateChanges lists every subscription whose state or reason changed,
	// of any app, in the order they were written.
	StateChanges []StateChange `json:"stateChanges,omitempty"`

	// BreakingChanges lists the declarations whose changed dataSchema may
	// reject data the stored one accepted: applied only with AllowBreaking,
	// and reported by DiffManifests.
	BreakingChanges []DeclarationBreak `json:"breakingChanges,omitempty"`

	// Details names what changed; only DiffManifests fills it.
	Details *ApplyDetails `json:"details,omitempty"`
}

// ApplyDetails names the declarations ("<type>@<version>") and
// subscriptions an apply adds, changes, retires, restores or cancels.
type ApplyDetails struct {
	DeclarationsAdded      []string `json:"declarationsAdded"`
	DeclarationsChanged    []string `json:"declarationsChanged"`
	DeclarationsRetired    []string `json:"declarationsRetired"`
	DeclarationsRestored   []string `json:"declarationsRestored"`
	SubscriptionsAdded     []string `json:"subscriptionsAdded"`
	SubscriptionsRestored  []string `json:"subscriptionsRestored"`
	SubscriptionsCancelled []string `json:"subscriptionsCancelled"`
}

// DeclarationBreak is one declaration's breaking schema changes.
type DeclarationBreak struct {
	Declaration string                  `json:"declaration"` // "<type>@<version>"
	Changes     []manifest.SchemaChange `json:"changes"`
}

// ApplyOptions adjust ApplyManifestWith.
type ApplyOptions struct {
	// Actor is recorded in the audit rows; empty means ActorSystem.
	Actor string
	// AllowBreaking applies dataSchema changes that may reject data the
	// stored schema accepted (manifest.BreakingChanges), which are refused
	// otherwise. Reason is then required; both go into the audit trail.
	AllowBreaking bool
	Reason        string
	// dryRun reports breaking changes instead of refusing them and fills
	// Details; DiffManifests sets it and rolls back.
	dryRun bool
}

// BreakingChangeError refuses an apply whose changed dataSchemas may reject
// data the stored ones accepted.
type BreakingChangeError struct {
	App    string
	Breaks []DeclarationBreak
}

// Error names each declaration and change and says how to proceed.
func (e *BreakingChangeError) Error() string {
	var b strings.Builder
	b.WriteString("breaking dataSchema changes refused")
	for _, d := range e.Breaks {
		typ, version, _ := strings.Cut(d.Declaration, "@")
		next := version
		if v, err := strconv.Atoi(version); err == nil {
			next = strconv.Itoa(v + 1)
		}
		fmt.Fprintf(&b, "\n  %s: the new dataSchema may reject events the current one accepts; "+
			"declare the changed schema as %s@%s and keep %s as it is:", d.Declaration, typ, next, d.Declaration)
		for _, c := range d.Changes {
			fmt.Fprintf(&b, "\n    %s", c)
		}
	}
	return b.String()
}

// StateChange is one subscription's move from one state and reason to another.
type StateChange struct {
	SubscriptionID string `json:"subscriptionId"`
	From           string `json:"from"`
	FromReason     string `json:"fromReason,omitempty"`
	To             string `json:"to"`
	ToReason       string `json:"toReason,omitempty"`
}

// ApplyManifest brings the stored declarations and subscriptions of m.App in
// line with m (docs/design.md#manifests), in one transaction, and then recomputes the state of
// every subscription of every app. m must already be validated.
//
// Applies of one app are serialized by a lock on the app (a row of
// apply_locks); an apply whose content hash matches the stored one writes
// nothing. Applies that do write also take one lock for all subscription
// states before touching any, so concurrent applies of different apps queue
// instead of deadlocking, and end as if run one after the other.
func (s *Store) ApplyManifest(ctx context.Context, m *manifest.Manifest, actor string) (ApplyResult, error) {
	return s.ApplyManifestWith(ctx, m, ApplyOptions{Actor: actor})
}

// ApplyManifestWith is ApplyManifest with options. Without AllowBreaking, a
// changed dataSchema of an existing (event, version) that may reject data
// the stored one accepted fails the apply with a *BreakingChangeError and
// nothing is written; with it, each such declaration gets a
// declaration.breaking_change audit row with the changes and the reason.
func (s *Store) ApplyManifestWith(ctx context.Context, m *manifest.Manifest, opts ApplyOptions) (ApplyResult, error) {
	if m == nil || m.App == "" {
		return ApplyResult{}, errors.New("apply manifest: no app named")
	}
	if err := refuseReserved(m); err != nil {
		return ApplyResult{}, fmt.Errorf("apply manifest: %w", err)
	}
	if opts.AllowBreaking && strings.TrimSpace(opts.Reason) == "" {
		return ApplyResult{}, fmt.Errorf("apply manifest %s: allowing breaking changes needs a reason", m.App)
	}
	var res ApplyResult
	err := s.WithTx(ctx, func(tx pgx.Tx) error {
		var err error
		res, err = applyManifestTx(ctx, tx, m, opts)
		return err
	})
	if err != nil {
		return ApplyResult{}, fmt.Errorf("apply manifest %s: %w", m.App, err)
	}
	return res, nil
}

// errDryRun rolls back the transaction of DiffManifests.
var errDryRun = errors.New("dry run")

// DiffManifests reports what applying ms, in order, would change, and changes
// nothing: it applies them in one transaction and rolls it back. Breaking
// schema changes are reported (ApplyResult.BreakingChanges), not refused,
// and each result's Details names what changes. Like an apply, it waits for
// applies of the same apps that are under way.
func (s *Store) DiffManifests(ctx context.Context, ms []*manifest.Manifest) ([]ApplyResult, error) {
	out := make([]ApplyResult, 0, len(ms))
	err := s.WithTx(ctx, func(tx pgx.Tx) error {
		for _, m := range ms {
			if m == nil || m.App == "" {
				return errors.New("no app named")
			}
			if err := refuseReserved(m); err != nil {
				return err
			}
			res, err := applyManifestTx(ctx, tx, m, ApplyOptions{Actor: ActorSystem, dryRun: true})
			if err != nil {
				return fmt.Errorf("%s: %w", m.App, err)
			}
			out = append(out, res)
		}
		return errDryRun
	})
	if err != nil && !errors.Is(err, errDryRun) {
		return nil, fmt.Errorf("diff manifests: %w", err)
	}
	return out, nil
}

// applyManifestTx is ApplyManifestWith in tx.
func applyManifestTx(ctx context.Context, tx pgx.Tx, m *manifest.Manifest, opts ApplyOptions) (ApplyResult, error) {
	actor := opts.Actor
	hash := m.Hash()
	doc, err := json.Marshal(m)
	if err != nil {
		return ApplyResult{}, fmt.Errorf("encode: %w", err)
	}
	res := ApplyResult{App: m.App}
	if opts.dryRun {
		res.Details = &ApplyDetails{}
	}
	if err := lockApp(ctx, tx, m.App); err != nil {
		return ApplyResult{}, err
	}
	var stored string
	var removed bool
	var before Limits
	err = tx.QueryRow(ctx, `SELECT content_hash, removed_at IS NOT NULL,
		       COALESCE(max_per_second, 0), COALESCE(max_in_flight, 0) FROM apps WHERE id = $1`,
		m.App).Scan(&stored, &removed, &before.MaxPerSecond, &before.MaxInFlight)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return ApplyResult{}, fmt.Errorf("read app: %w", err)
	}
	if err == nil && stored == hash && !removed {
		res.Unchanged = true
		return res, nil
	}
	if err := lockSubscriptionStates(ctx, tx); err != nil {
		return ApplyResult{}, err
	}
	limits := manifestLimits(m)
	if _, err := tx.Exec(ctx, `
		INSERT INTO apps (id, endpoint, delivery_path, manifest, content_hash, max_per_second, max_in_flight)
		VALUES ($1, $2, $3, $4::jsonb, $5, NULLIF($6::double precision, 0), NULLIF($7::integer, 0))
		ON CONFLICT (id) DO UPDATE SET
			endpoint = EXCLUDED.endpoint, delivery_path = EXCLUDED.delivery_path,
			manifest = EXCLUDED.manifest, content_hash = EXCLUDED.content_hash,
			max_per_second = EXCLUDED.max_per_second, max_in_flight = EXCLUDED.max_in_flight,
			applied_at = now(), removed_at = NULL`,
		m.App, m.Endpoint, m.Path(), string(doc), hash, limits.MaxPerSecond, limits.MaxInFlight); err != nil {
		return ApplyResult{}, fmt.Errorf("save app: %w", err)
	}
	if removed {
		if err := forgetRemovedApp(ctx, tx, m.App, actor); err != nil {
			return ApplyResult{}, err
		}
	}
	if limits != before {
		res.LimitsChanged = true
		res.LimitsFrom, res.LimitsTo = &before, &limits
		if err := AppendAudit(ctx, tx, AuditEntry{
			Action: ActionAppLimitsChanged, Actor: actor, TargetType: TargetApp, TargetID: m.App,
			Metadata: map[string]any{"from": before, "to": limits},
		}); err != nil {
			return ApplyResult{}, err
		}
	}
	if err := syncDeclarations(ctx, tx, m, opts, &res); err != nil {
		return ApplyResult{}, err
	}
	restore, err := syncSubscriptions(ctx, tx, m, actor, &res)
	if err != nil {
		return ApplyResult{}, err
	}
	if err := recomputeStates(ctx, tx, actor, restore, &res); err != nil {
		return ApplyResult{}, err
	}
	meta := res.auditMetadata()
	meta["hash"] = hash
	meta["limits"] = limits
	meta["limitsChanged"] = res.LimitsChanged
	if m.Source != "" {
		meta["source"] = m.Source
	}
	if len(res.BreakingChanges) > 0 {
		meta["allowBreaking"] = true
		meta["reason"] = opts.Reason
		meta["breakingChanges"] = res.BreakingChanges
	}
	if err := AppendAudit(ctx, tx, AuditEntry{
		Action: ActionAppApplied, Actor: actor,
		TargetType: TargetApp, TargetID: m.App, Metadata: meta,
	}); err != nil {
		return ApplyResult{}, err
	}
	return res, nil
}

// ActionAppLimitsChanged is the audit action of changed app delivery limits.
const ActionAppLimitsChanged = "app.limits_changed"

// manifestLimits are m's limits as the store keeps them.
func manifestLimits(m *manifest.Manifest) Limits {
	if m.Limits == nil {
		return Limits{}
	}
	return Limits{MaxPerSecond: m.Limits.MaxPerSecond, MaxInFlight: m.Limits.MaxInFlight}
}

// RemoveApp retires every declaration of app, cancels its subscriptions,
// marks it removed and recomputes every subscription's state. Removing a
// removed app changes nothing (Unchanged); an unknown app fails with an error
// wrapping ErrNotFound. Applying a manifest for the app again restores it.
func (s *Store) RemoveApp(ctx context.Context, app, actor string) (ApplyResult, error) {
	var res ApplyResult
	err := s.WithTx(ctx, func(tx pgx.Tx) error {
		res = ApplyResult{App: app}
		if err := lockApp(ctx, tx, app); err != nil {
			return err
		}
		if app == HeraldApp {
			// Herald's own app cannot be removed; a user's app of that
			// name, declared before the name was reserved, can.
			if own, _, err := heraldAppIsOwn(ctx, tx); err != nil || own {
				if err == nil {
					err = ErrReservedApp
				}
				return fmt.Errorf("remove app %s: %w", app, err)
			}
		}
		var removed bool
		err := tx.QueryRow(ctx, `SELECT removed_at IS NOT NULL FROM apps WHERE id = $1`, app).Scan(&removed)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("read app: %w", err)
		}
		if removed {
			res.Unchanged = true
			return nil
		}
		if err := lockSubscriptionStates(ctx, tx); err != nil {
			return err
		}
		retired, err := retireDeclarations(ctx, tx, app, nil, actor)
		if err != nil {
			return err
		}
		res.DeclarationsRetired = len(retired)
		if err := cancelSubscriptions(ctx, tx, app, nil, actor, &res); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE apps SET removed_at = now() WHERE id = $1`, app); err != nil {
			return fmt.Errorf("mark app removed: %w", err)
		}
		if err := revokeAppTokens(ctx, tx, app, actor); err != nil {
			return err
		}
		if err := recomputeStates(ctx, tx, actor, nil, &res); err != nil {
			return err
		}
		return AppendAudit(ctx, tx, AuditEntry{
			Action: ActionAppRemoved, Actor: actor,
			TargetType: TargetApp, TargetID: app, Metadata: res.auditMetadata(),
		})
	})
	if err != nil {
		return ApplyResult{}, fmt.Errorf("remove app %s: %w", app, err)
	}
	return res, nil
}

func (r *ApplyResult) auditMetadata() map[string]any {
	return map[string]any{
		"declarationsAdded":      r.DeclarationsAdded,
		"declarationsUpdated":    r.DeclarationsUpdated,
		"declarationsRetired":    r.DeclarationsRetired,
		"declarationsRestored":   r.DeclarationsRestored,
		"subscriptionsAdded":     r.SubscriptionsAdded,
		"subscriptionsRestored":  r.SubscriptionsRestored,
		"subscriptionsCancelled": r.SubscriptionsCancelled,
		"stateChanges":           len(r.StateChanges),
	}
}

// lockApp serializes the transactions that change one app: it locks the
// app's row of apply_locks, made by the first apply, until tx ends. The
// lock is a row of a Herald table rather than an advisory lock, which any
// role that can log in could take and hold to block applies.
func lockApp(ctx context.Context, tx pgx.Tx, app string) error {
	if err := lockApplyRow(ctx, tx, "app:"+app); err != nil {
		return fmt.Errorf("lock app %s: %w", app, err)
	}
	return nil
}

// lockSubscriptionStates serializes every transaction that changes
// subscription states (the 'subscriptions' row of apply_locks). It is
// always taken after an app lock, never before, so the two locks cannot
// deadlock.
func lockSubscriptionStates(ctx context.Context, tx pgx.Tx) error {
	if err := lockApplyRow(ctx, tx, "subscriptions"); err != nil {
		return fmt.Errorf("lock subscription states: %w", err)
	}
	return nil
}

// lockApplyRow locks the apply_locks row name until tx ends, making it if
// it does not exist. The upsert locks an existing row (and waits for its
// holder); a concurrent first insert of the same name waits for the other
// transaction and then locks the row it made.
func lockApplyRow(ctx context.Context, tx pgx.Tx, name string) error {
	_, err := tx.Exec(ctx, `
		INSERT INTO apply_locks (name) VALUES ($1)
		ON CONFLICT (name) DO UPDATE SET locked_at = now()`, name)
	return err
}

func declarationKey(eventType string, version int) string {
	return eventType + "@" + strconv.Itoa(version)
}

// syncDeclarations inserts, updates and restores the declarations of m's
// events and retires the app's declarations m no longer lists.
func syncDeclarations(ctx context.Context, tx pgx.Tx, m *manifest.Manifest, opts ApplyOptions, res *ApplyResult) error {
	actor := opts.Actor
	keep := make([]string, 0, len(m.Events))
	for _, e := range m.Events {
		typ := manifest.EventType(m.App, e.Name)
		key := declarationKey(typ, e.Version)
		keep = append(keep, key)
		var place any
		if e.HasPlace() {
			place = string(e.Place)
		}
		args := []any{typ, e.Version, m.App, e.Name, e.Subject, e.Title, e.Description,
			e.IsAutomation(), place, string(e.DataSchema), e.Deprecated}

		var retired, changed, schemaChanged bool
		var storedSchema json.RawMessage
		err := tx.QueryRow(ctx, `
			SELECT retired_at IS NOT NULL,
			       (subject, title, description, automation, place, data_schema, deprecated)
			         IS DISTINCT FROM ($5::text, $6::text, $7::text, $8::boolean, $9::jsonb, $10::jsonb, $11::boolean),
			       data_schema IS DISTINCT FROM $10::jsonb, data_schema
			  FROM declarations WHERE type = $1 AND version = $2 AND app = $3 AND name = $4
			   FOR UPDATE`, args...).Scan(&retired, &changed, &schemaChanged, &storedSchema)
		if errors.Is(err, pgx.ErrNoRows) {
			if _, err := tx.Exec(ctx, `
				INSERT INTO declarations (type, version, app, name, subject, title, description,
				                          automation, place, data_schema, deprecated)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, $10::jsonb, $11)`, args...); err != nil {
				return fmt.Errorf("declare %s: %w", key, err)
			}
			res.DeclarationsAdded++
			res.detail(func(d *ApplyDetails) { d.DeclarationsAdded = append(d.DeclarationsAdded, key) })
			continue
		}
		if err != nil {
			return fmt.Errorf("read declaration %s: %w", key, err)
		}
		if !retired && !changed {
			continue
		}
		if schemaChanged {
			changes, err := manifest.BreakingChanges(storedSchema, e.DataSchema)
			if err != nil {
				return fmt.Errorf("compare the dataSchema of %s: %w", key, err)
			}
			if len(changes) > 0 {
				res.BreakingChanges = append(res.BreakingChanges, DeclarationBreak{Declaration: key, Changes: changes})
			}
		}
		if _, err := tx.Exec(ctx, `
			UPDATE declarations SET subject = $5, title = $6, description = $7, automation = $8,
			       place = $9::jsonb, data_schema = $10::jsonb, deprecated = $11, retired_at = NULL, updated_at = now()
			 WHERE type = $1 AND version = $2 AND app = $3 AND name = $4`, args...); err != nil {
			return fmt.Errorf("update declaration %s: %w", key, err)
		}
		if changed {
			res.DeclarationsUpdated++
			res.detail(func(d *ApplyDetails) { d.DeclarationsChanged = append(d.DeclarationsChanged, key) })
		}
		if retired {
			res.DeclarationsRestored++
			res.detail(func(d *ApplyDetails) { d.DeclarationsRestored = append(d.DeclarationsRestored, key) })
			if err := AppendAudit(ctx, tx, AuditEntry{
				Action: ActionDeclarationRestored, Actor: actor,
				TargetType: TargetDeclaration, TargetID: key,
				Metadata: map[string]any{"app": m.App},
			}); err != nil {
				return err
			}
		}
	}
	if len(res.BreakingChanges) > 0 && !opts.dryRun {
		if !opts.AllowBreaking {
			return &BreakingChangeError{App: m.App, Breaks: res.BreakingChanges}
		}
		for _, b := range res.BreakingChanges {
			if err := AppendAudit(ctx, tx, AuditEntry{
				Action: ActionDeclarationBreakingChange, Actor: actor,
				TargetType: TargetDeclaration, TargetID: b.Declaration,
				Metadata: map[string]any{"app": m.App, "reason": opts.Reason, "changes": b.Changes},
			}); err != nil {
				return err
			}
		}
	}
	retired, err := retireDeclarations(ctx, tx, m.App, keep, actor)
	res.DeclarationsRetired = len(retired)
	if res.Details != nil {
		res.Details.DeclarationsRetired = append(res.Details.DeclarationsRetired, retired...)
	}
	return err
}

// detail records a named change with f when the result keeps details (a
// dry run).
func (r *ApplyResult) detail(f func(*ApplyDetails)) {
	if r.Details != nil {
		f(r.Details)
	}
}

// retireDeclarations retires the live declarations of app whose
// "type@version" is not in keep, writing one declaration.retired audit row
// each, and returns the retired ones' "type@version", sorted.
func retireDeclarations(ctx context.Context, tx pgx.Tx, app string, keep []string, actor string) ([]string, error) {
	if keep == nil {
		keep = []string{}
	}
	rows, err := tx.Query(ctx, `
		UPDATE declarations SET retired_at = now(), updated_at = now()
		 WHERE app = $1 AND retired_at IS NULL AND NOT (type || '@' || version = ANY($2::text[]))
		RETURNING type || '@' || version`, app, keep)
	if err != nil {
		return nil, fmt.Errorf("retire declarations: %w", err)
	}
	retired, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("retire declarations: %w", err)
	}
	slices.Sort(retired)
	for _, key := range retired {
		if err := AppendAudit(ctx, tx, AuditEntry{
			Action: ActionDeclarationRetired, Actor: actor,
			TargetType: TargetDeclaration, TargetID: key,
			Metadata: map[string]any{"app": app},
		}); err != nil {
			return nil, err
		}
	}
	return retired, nil
}

// syncSubscriptions creates m's new subscriptions, cancels the app's
// subscriptions m no longer lists and returns the ids of the cancelled ones m
// lists again, for recomputeStates to restore.
func syncSubscriptions(ctx context.Context, tx pgx.Tx, m *manifest.Manifest, actor string, res *ApplyResult) ([]string, error) {
	existing, err := appSubscriptionStates(ctx, tx, m.App)
	if err != nil {
		return nil, err
	}
	wanted := map[string]bool{}
	var restore []string
	for _, sub := range m.Subscribes {
		id := manifest.SubscriptionID(m.App, sub.Type, sub.Version)
		if wanted[id] {
			continue
		}
		wanted[id] = true
		state, ok := existing[id]
		switch {
		case !ok:
			if _, err := tx.Exec(ctx, `
				INSERT INTO subscriptions (id, app, type, version, state, reason)
				VALUES ($1, $2, $3, $4, $5, $6)`,
				id, m.App, sub.Type, sub.Version, StateBlocked, ReasonEventNotDeclared); err != nil {
				return nil, fmt.Errorf("create subscription %s: %w", id, err)
			}
			if err := AppendAudit(ctx, tx, AuditEntry{
				Action: ActionSubscriptionFirstSeen, Actor: actor,
				TargetType: TargetSubscription, TargetID: id,
				Metadata: map[string]any{
					"app": m.App, "type": sub.Type, "version": sub.Version,
					"state": StateBlocked, "reason": ReasonEventNotDeclared,
				},
			}); err != nil {
				return nil, err
			}
			res.SubscriptionsAdded++
			res.detail(func(d *ApplyDetails) { d.SubscriptionsAdded = append(d.SubscriptionsAdded, id) })
		case state == StateCancelled:
			restore = append(restore, id)
			res.SubscriptionsRestored++
			res.detail(func(d *ApplyDetails) { d.SubscriptionsRestored = append(d.SubscriptionsRestored, id) })
		}
		if err := syncFilter(ctx, tx, id, sub.Filter, actor); err != nil {
			return nil, err
		}
		if err := syncPolicy(ctx, tx, id, sub, actor); err != nil {
			return nil, err
		}
	}
	return restore, cancelSubscriptions(ctx, tx, m.App, wanted, actor, res)
}

// ActionSubscriptionFilterChanged is the audit action of a changed content filter.
const ActionSubscriptionFilterChanged = "subscription.filter_changed"

// syncFilter sets a subscription's content filter when it changed, keeping
// the previous one and the time of the change, and audits it.
func syncFilter(ctx context.Context, tx pgx.Tx, id, filter, actor string) error {
	var prev *string
	err := tx.QueryRow(ctx, `
		UPDATE subscriptions s SET filter_prev = s.filter, filter = NULLIF($2, ''), filter_changed_at = now()
		 WHERE s.id = $1 AND s.filter IS DISTINCT FROM NULLIF($2, '')
		RETURNING s.filter_prev`, id, filter).Scan(&prev)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // unchanged
	}
	if err != nil {
		return fmt.Errorf("set the filter of %s: %w", id, err)
	}
	from := ""
	if prev != nil {
		from = *prev
	}
	return AppendAudit(ctx, tx, AuditEntry{
		Action: ActionSubscriptionFilterChanged, Actor: actor, TargetType: TargetSubscription, TargetID: id,
		Metadata: map[string]any{"from": from, "to": filter},
	})
}

// appSubscriptionStates returns the state of each subscription of app by id.
func appSubscriptionStates(ctx context.Context, tx pgx.Tx, app string) (map[string]string, error) {
	rows, err := tx.Query(ctx, `SELECT id, state FROM subscriptions WHERE app = $1`, app)
	if err != nil {
		return nil, fmt.Errorf("read subscriptions: %w", err)
	}
	out := map[string]string{}
	var id, state string
	_, err = pgx.ForEachRow(rows, []any{&id, &state}, func() error {
		out[id] = state
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read subscriptions: %w", err)
	}
	return out, nil
}

// cancelSubscriptions cancels every subscription of app that is not
// cancelled yet and whose id is not in keep, paused ones included.
func cancelSubscriptions(ctx context.Context, tx pgx.Tx, app string, keep map[string]bool, actor string, res *ApplyResult) error {
	rows, err := tx.Query(ctx, `SELECT `+subscriptionColumns+` FROM subscriptions
		WHERE app = $1 AND state <> $2 ORDER BY id FOR UPDATE`, app, StateCancelled)
	if err != nil {
		return fmt.Errorf("read subscriptions: %w", err)
	}
	subs, err := pgx.CollectRows(rows, pgx.RowToStructByName[Subscription])
	if err != nil {
		return fmt.Errorf("read subscriptions: %w", err)
	}
	for _, sub := range subs {
		if keep[sub.ID] {
			continue
		}
		c := StateChange{SubscriptionID: sub.ID, From: sub.State, FromReason: sub.Reason,
			To: StateCancelled, ToReason: ReasonSubscriptionRemoved}
		if err := writeStateChange(ctx, tx, c, actor, nil); err != nil {
			return err
		}
		// Its keys' pauses go with it: a key whose workflow runs forgets
		// its own when it drops its queue (keyTransition), one with none
		// would otherwise start paused if the subscription came back.
		if _, err := tx.Exec(ctx, `DELETE FROM paused_keys WHERE subscription_id = $1`, sub.ID); err != nil {
			return fmt.Errorf("forget the paused keys of %s: %w", sub.ID, err)
		}
		res.StateChanges = append(res.StateChanges, c)
		res.SubscriptionsCancelled++
		res.detail(func(d *ApplyDetails) { d.SubscriptionsCancelled = append(d.SubscriptionsCancelled, sub.ID) })
	}
	return nil
}

// recomputeStates gives every subscription that is neither paused nor
// cancelled, and every cancelled one listed in restore, the state its
// declaration calls for (docs/design.md#manifests), writing one audit row per change.
// Rows are locked in id order; the caller holds lockSubscriptionStates.
func recomputeStates(ctx context.Context, tx pgx.Tx, actor string, restore []string, res *ApplyResult) error {
	if restore == nil {
		restore = []string{}
	}
	type row struct {
		ID       string `db:"id"`
		State    string `db:"state"`
		Reason   string `db:"reason"`
		Declared bool   `db:"declared"`
		HasPlace bool   `db:"has_place"`
	}
	rows, err := tx.Query(ctx, `
		SELECT s.id, s.state, COALESCE(s.reason, '') AS reason,
		       COALESCE(d.declared, false) AS declared, COALESCE(d.has_place, false) AS has_place
		  FROM subscriptions s
		  LEFT JOIN LATERAL (
		        SELECT true AS declared,
		               d.place IS NOT NULL AND d.place <> 'null'::jsonb AS has_place
		          FROM declarations d JOIN apps a ON a.id = d.app
		         WHERE d.type = s.type AND d.version = s.version
		           AND d.app = split_part(s.type, '.', 1)
		           AND d.retired_at IS NULL AND a.removed_at IS NULL) d ON true
		 WHERE (s.state <> $1 AND s.state <> $2) OR s.id = ANY($3::text[])
		 ORDER BY s.id
		   FOR UPDATE OF s`, StatePaused, StateCancelled, restore)
	if err != nil {
		return fmt.Errorf("recompute subscription states: %w", err)
	}
	subs, err := pgx.CollectRows(rows, pgx.RowToStructByName[row])
	if err != nil {
		return fmt.Errorf("recompute subscription states: %w", err)
	}
	for _, sub := range subs {
		to, toReason := stateFor(sub.Declared, sub.HasPlace)
		if to == sub.State && toReason == sub.Reason {
			continue
		}
		c := StateChange{SubscriptionID: sub.ID, From: sub.State, FromReason: sub.Reason, To: to, ToReason: toReason}
		if err := writeStateChange(ctx, tx, c, actor, nil); err != nil {
			return err
		}
		res.StateChanges = append(res.StateChanges, c)
	}
	return nil
}
