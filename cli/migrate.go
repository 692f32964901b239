package cli

import (
	"fmt"
	"strconv"
	"strings"
)

// runMigrate applies the embedded migrations not applied yet.
func runMigrate(inv *invocation, args []string) error {
	fs := inv.newFlags("migrate")
	rest, err := inv.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("migrate", rest); err != nil {
		return err
	}
	st, err := inv.openStore()
	if err != nil {
		return err
	}
	defer st.Close()
	applied, err := st.Migrate(inv.ctx)
	if err != nil {
		return err
	}
	if inv.json {
		return writeJSON(inv.stdout, struct {
			Applied []int `json:"applied"`
		}{nonNil(applied)})
	}
	if len(applied) == 0 {
		fmt.Fprintln(inv.stdout, "the database schema is up to date")
		return nil
	}
	versions := make([]string, len(applied))
	for i, v := range applied {
		versions[i] = strconv.Itoa(v)
	}
	fmt.Fprintf(inv.stdout, "applied %s: %s\n", plural(len(applied), "migration"), strings.Join(versions, ", "))
	return nil
}
