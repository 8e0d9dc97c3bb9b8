// Package clientcheck holds no code of its own: its tests run the Go client
// (github.com/heraldhq/herald/client, the client/ directory, a module of
// its own) against the real API of this repository, which the client's
// module cannot import: herald's API handler over a fresh SQLite store, in
// process, as the client's users meet it. They also hold the client module
// to what a program that uses it should get: the standard library only, and
// a go directive no higher than its code needs.
//
// The examples are the client's, with their output checked against the
// real API; client/example_test.go shows the same calls on the client's
// documentation.
package clientcheck
