package main

import "github.com/heraldhq/herald/internal/engine"

// store is an engine as the builder holds it (PostgreSQL, SQLite or
// MongoDB, chosen by HERALD_DATABASE_URL): engine.Store, the union of
// the seams a store serves, which the store conformance suite tests.
type store = engine.Store
