package main

import "github.com/heraldhq/herald/internal/testkit/storetest"

// The builder's store and the conformance suite's contract are the same
// set of seams: each is assignable to the other, so an engine the suite
// passes is one the builder can hold, and a seam added to either must be
// added to both.
var (
	_ storetest.Store = store(nil)
	_ store           = storetest.Store(nil)
)
