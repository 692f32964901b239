package main

import (
	"net"
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"

	"herald/internal/procstat"
)

// localServers finds the local Temporal and PostgreSQL servers of cfg, for
// CPU accounting and the pinned configuration: the PIDs the caller named in
// cfg.PIDs, else the processes listening on their addresses. Either is 0
// when not found here.
func localServers(cfg Config) (temporal, postgres int) {
	temporal, postgres = cfg.PIDs["temporal"], cfg.PIDs["postgres"]
	if temporal <= 0 {
		temporal = procstat.ListenerPID(cfg.TemporalAddress)
	}
	if postgres <= 0 {
		postgres = 0
		if pc, err := pgconn.ParseConfig(cfg.DatabaseURL); err == nil {
			postgres = procstat.ListenerPID(net.JoinHostPort(pc.Host, strconv.Itoa(int(pc.Port))))
		}
	}
	return temporal, postgres
}
