package api

import "slices"

// Routes lists the route patterns the API serves, sorted, for the test
// that holds them against the OpenAPI document.
func (a *API) Routes() []string {
	var out []string
	for p := range a.routes {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// OpenAPIDocument is the embedded document, for the tests.
var OpenAPIDocument = openAPIDocument
