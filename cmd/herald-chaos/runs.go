package main

// chaosRun is one --transport value: a broker on a store.
type chaosRun struct {
	name string
	// broker and store name rows of chaosBrokers and chaosStores.
	broker, store string
	// nodes is how many broker nodes the run starts (1 unless set).
	nodes int
	// pg is the database topology the run always has ("": --pg's).
	pg string
	// report is the transport its report names ("": name).
	report string
	// env, when set, is the variable that adds the run (=1) to the runs
	// asked for; such a run is not one of all.
	env string
}

// runVariants are the runs beyond one for each broker on PostgreSQL.
var runVariants = []chaosRun{
	// The table transport on the MongoDB store, served by a FerretDB
	// process of the harness's own over the scratch database (no failover
	// of its own).
	{name: "mongodb", broker: "table", store: "mongodb", pg: pgShared},
	// The table transport's run through a PgBouncer in front of each
	// server (--pg pgbouncer), with herald's default settings (no
	// HERALD_DATABASE_DIRECT_URL: the workers poll): every claim and every
	// record of a delivery goes through the pooler.
	{name: "pgbouncer", broker: "table", store: "postgres", pg: pgBouncer},
	// Three nodes (25-80 s to start), added by HERALD_CHAOS_CLUSTER=1.
	{name: "rabbitmq-cluster", broker: "rabbitmq", store: "postgres", nodes: 3, report: "rabbitmq", env: "HERALD_CHAOS_CLUSTER"},
}

// transportAliases are the older spellings --transport still takes.
var transportAliases = map[string][]string{"both": {"rabbitmq", "table"}}

// chaosRuns are every run --transport names: one for each broker, on
// PostgreSQL, in the order of chaosBrokers, then the variants.
func chaosRuns() []chaosRun {
	var out []chaosRun
	for _, b := range chaosBrokers {
		out = append(out, chaosRun{name: b.name, broker: b.name, store: "postgres"})
	}
	return append(out, runVariants...)
}

// runNamed returns the run named name.
func runNamed(name string) chaosRun {
	for _, r := range chaosRuns() {
		if r.name == name {
			return r
		}
	}
	panic("chaos: no run " + name)
}

// runNames returns the names of the runs, all of them or (all false)
// those that make a plain `make chaos`.
func runNames(all bool) []string {
	var out []string
	for _, r := range chaosRuns() {
		if all || r.env == "" {
			out = append(out, r.name)
		}
	}
	return out
}
