package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"herald/store"
)

// Environment of `starter migrate`.
const (
	// envOwnerDatabaseURL is the URL of the role that owns Herald's tables;
	// migrate connects with it when set, else with HERALD_DATABASE_URL.
	envOwnerDatabaseURL = "HERALD_OWNER_DATABASE_URL"
	// envRuntimeRole is the default of --runtime-role.
	envRuntimeRole = "HERALD_RUNTIME_ROLE"
)

// runMigrate applies the embedded migrations not applied yet, as the owner
// role, and then grants the runtime role (the workers' and the CLI's) what
// it needs on every table, the audit trail only INSERT and SELECT.
func runMigrate(inv *invocation, args []string) error {
	fs := inv.newFlags("migrate")
	runtimeRole := fs.String("runtime-role", inv.getenv(envRuntimeRole),
		"after migrating, grant this role (the workers' and the CLI's) use of every table, and only INSERT and SELECT on the audit trail")
	rest, err := inv.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("migrate", rest); err != nil {
		return err
	}
	st, err := inv.openOwnerStore()
	if err != nil {
		return err
	}
	defer st.Close()
	applied, err := st.Migrate(inv.ctx)
	if err != nil {
		return err
	}
	if *runtimeRole != "" {
		if err := st.GrantRuntime(inv.ctx, *runtimeRole); err != nil {
			return err
		}
	}
	if inv.json {
		return writeJSON(inv.stdout, struct {
			Applied     []int  `json:"applied"`
			RuntimeRole string `json:"runtimeRole,omitempty"`
		}{nonNil(applied), *runtimeRole})
	}
	granted := ""
	if *runtimeRole != "" {
		granted = fmt.Sprintf("; role %s may use the tables (the audit trail: INSERT and SELECT only)", *runtimeRole)
	}
	if len(applied) == 0 {
		fmt.Fprintf(inv.stdout, "the database schema is up to date%s\n", granted)
		return nil
	}
	versions := make([]string, len(applied))
	for i, v := range applied {
		versions[i] = strconv.Itoa(v)
	}
	fmt.Fprintf(inv.stdout, "applied %s: %s%s\n", plural(len(applied), "migration"), strings.Join(versions, ", "), granted)
	return nil
}

// openOwnerStore connects as the owner role: HERALD_OWNER_DATABASE_URL, or
// HERALD_DATABASE_URL when that is not set (one role for everything).
func (inv *invocation) openOwnerStore() (*store.Store, error) {
	if err := inv.act(); err != nil {
		return nil, err
	}
	u := inv.getenv(envOwnerDatabaseURL)
	if u == "" {
		return inv.openStore()
	}
	ctx, cancel := context.WithTimeout(inv.ctx, connectTimeout)
	defer cancel()
	return store.Open(ctx, u, store.Options{MaxConns: 4})
}
