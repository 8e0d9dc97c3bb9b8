// Package testkit holds no code: its packages are herald's test helpers,
// kept apart from the product's packages so that a reader of internal/
// sees the product, and so that a test can tell which imports are
// helpers. They are the conformance suites (storetest, transporttest,
// pipelinetest, sendertest), the servers tests talk to (smtptest,
// webhooktest, sqstest, mongotest, pgcluster), fault injection
// (faultproxy), herald's processes under test (proctest), and the set-up
// and logging every test shares (testenv, pgtest, deliverytest, testlog).
//
// No product package imports them but the two that measure and break the
// product: herald bench (internal/bench/provider and cmd/herald's bench
// command, which receive what herald sends on an in-process SMTP sink and
// webhook receiver; built out of the shipped binary with -tags nobench)
// and the chaos harness (cmd/herald-chaos).
// TestOnlyBenchAndChaosImportTestkit holds that.
package testkit
