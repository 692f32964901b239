package cli

import (
	"errors"
	"fmt"
	"time"

	"herald/store"
)

// runDB runs the database commands: `db grant-publisher APP ROLE` and `db
// key-stripes [--fine-only]`.
func runDB(inv *invocation, args []string) error {
	sub, rest := splitSubcommand(args)
	switch sub {
	case "grant-publisher":
		return runDBGrantPublisher(inv, rest)
	case "key-stripes":
		return runDBKeyStripes(inv, rest)
	case "":
		if len(rest) > 0 && isHelpFlag(rest[0]) {
			c, _ := lookupCommand("db")
			printCommandUsage(inv.stdout, c)
			return nil
		}
		return usagef("db", "db: missing subcommand (grant-publisher, key-stripes)")
	default:
		return usagef("db", "db: unknown subcommand %q (want grant-publisher or key-stripes)", sub)
	}
}

// runDBGrantPublisher makes ROLE the publisher role of APP
// (docs/publishing.md#a-publisher-role-per-app), as the owner role.
func runDBGrantPublisher(inv *invocation, args []string) error {
	fs := inv.newFlags("db grant-publisher")
	actorFlag := fs.String("actor", "", "who grants, for the audit trail (default: $USER)")
	rest, err := inv.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("db grant-publisher", rest, "APP", "ROLE"); err != nil {
		return err
	}
	app, role := rest[0], rest[1]
	st, err := inv.openOwnerStore()
	if err != nil {
		return err
	}
	defer st.Close()
	if err := st.GrantPublisher(inv.ctx, app, role, inv.actor(*actorFlag)); err != nil {
		return err
	}
	if inv.json {
		return writeJSON(inv.stdout, struct {
			App  string `json:"app"`
			Role string `json:"role"`
		}{app, role})
	}
	fmt.Fprintf(inv.stdout, "role %s publishes for app %s only (PublishTx), with no right on Herald's tables\n", role, app)
	return nil
}

// runDBKeyStripes shows how publishers lock ordering keys
// (docs/design.md#key-locks) and, with --fine-only, retires the coarse
// stripe rows publishers of releases before migration 0032 lock.
func runDBKeyStripes(inv *invocation, args []string) error {
	fs := inv.newFlags("db key-stripes")
	fineOnly := fs.Bool("fine-only", false, "delete the coarse stripe rows: run once no publisher of a release before migration 0032 is left (workers, starter, apps linking PublishTx)")
	actorFlag := fs.String("actor", "", "who retires them, for the audit trail (default: $USER)")
	rest, err := inv.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("db key-stripes", rest); err != nil {
		return err
	}
	if *actorFlag != "" && !*fineOnly {
		return usagef("db", "db key-stripes: --actor goes with --fine-only")
	}
	st, err := inv.openStore()
	if err != nil {
		return err
	}
	defer st.Close()
	var deleted int64
	if *fineOnly {
		deleted, err = st.RetireCoarseStripes(inv.ctx, inv.actor(*actorFlag))
		if errors.Is(err, store.ErrFineOnly) {
			return invalidf("db key-stripes --fine-only: nothing to do: %w", err)
		}
		if err != nil {
			return err
		}
	}
	scheme, err := st.KeyStripeScheme(inv.ctx)
	if err != nil {
		return err
	}
	if inv.json {
		return writeJSON(inv.stdout, struct {
			store.KeyStripeScheme
			Deleted int64 `json:"coarseRowsDeleted"`
		}{scheme, deleted})
	}
	if *fineOnly {
		fmt.Fprintf(inv.stdout, "deleted %d coarse stripe rows; publishers of releases before migration 0032 now fail\n", deleted)
	}
	if scheme.Coarse {
		fmt.Fprintf(inv.stdout, "publishers lock a key's fine stripe row and its coarse one (kept for publishers of releases before migration 0032): %d fine rows, %d coarse rows\n",
			scheme.FineRows, scheme.CoarseRows)
		return nil
	}
	fmt.Fprintf(inv.stdout, "publishers lock a key's fine stripe row only, since %s: %d fine rows, %d coarse rows\n",
		scheme.ChangedAt.UTC().Format(time.RFC3339), scheme.FineRows, scheme.CoarseRows)
	return nil
}
