package notify

// MaxBatch is the most creates one batch may hold (POST
// /notifications/batch): a batch is one transaction, and a thousand rows
// keep it short.
const MaxBatch = 1000

// BatchResult is the outcome of one create of a batch (a store's
// CreateBatch): Created when it was written or replayed, or Err, which is
// ErrConflict (its idempotency key was used with another request). Any
// other failure fails the whole batch, and no BatchResult is returned.
type BatchResult struct {
	Created Created
	Err     error
}
