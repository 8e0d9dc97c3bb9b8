package storetest

import "github.com/heraldhq/herald/internal/engine"

// Store is the contract every store engine implements and this suite
// tests: engine.Store, the union of every component seam a store serves,
// which the composition root, cmd/herald, holds an engine as.
type Store = engine.Store
