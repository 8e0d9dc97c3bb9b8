// Package sqs is herald's Amazon SQS transport: a Publisher the relay
// hands outbox events to, and a Consumer the worker receives them from.
//
// HERALD_BROKER_URL=sqs://REGION/PREFIX[?endpoint=URL&fifo=true] names the
// region, the queue-name prefix (default "notifications") and, for a local
// SQS-compatible server, the endpoint. Credentials come from the AWS SDK's
// default chain (environment, shared files, the instance's or task's
// role); they are never read, logged or quoted here.
//
// Three queues, declared at start if missing (CreateQueue): PREFIX-send,
// which the relay publishes to and the workers receive from,
// PREFIX-send-dlq, herald's dead letters, and PREFIX-status, the status
// events. All end in ".fifo" with fifo=true. The send queue's redrive policy moves a message to the DLQ
// after MaxReceiveCount receipts (1000 by default): a backstop only, since
// herald dead-letters on its own retry count long before.
//
// Every process declares the queues, so they carry only what every
// process agrees on: a 14-day retention (and FifoQueue) on all three, the
// redrive policy on the send queue; never a visibility timeout, which
// follows each process's send timeouts and is asked by each receive
// instead. A queue that exists with other attributes is used as it is,
// each difference logged once; herald goes by the send queue's own
// maxReceiveCount, and refuses (an error naming the attribute and the fix)
// only a FIFO send queue whose count is below 4. See DeclareQueues.
//
// Every message carries its outbox id in the attribute herald-message-id,
// its event type in herald-type and when it was written in
// herald-occurred-at (Unix microseconds); copies carry x-retry-count and
// x-last-error.
//
// The relay sends with SendMessageBatch, ten entries at a time, each
// entry's result checked: the rows of refused entries stay unprocessed and
// are published again. On a FIFO queue MessageGroupId is the user_id (one
// user's messages in order, as on Kafka) and MessageDeduplicationId the
// outbox id, so a relay's re-publish within SQS's five minutes is stored
// once.
//
// The status events notification.sent and notification.failed (written by
// the transaction that settles a notification) go to PREFIX-status, with
// the same attributes (herald-message-id = the outbox id, herald-type,
// herald-occurred-at) and, on FIFO, the same group (user_id) and
// deduplication id (outbox id). No herald process receives from it: it is
// for another service, which receives and deletes them itself. SQS is a
// queue: each message goes to one of its receivers, so several services
// that each want every event need a fan-out of their own (an SNS topic
// fed by one reader, say). Nobody receiving, a message is dropped after
// the queue's retention (14 days). The relay's batches are split by
// queue, ten entries at a time per queue; an event of any other type is
// refused (left unconfirmed, the error names the type).
//
// A worker long-polls (WaitTime) for as many messages as it has idle
// handlers (Prefetch in flight at most). A received message is invisible
// for VisibilityTimeout (the receive's own), longer than the worker's claim lease, and the
// Consumer extends it (ChangeMessageVisibility) every third of that while
// the handler runs, so a slow send keeps its message; if the extension
// fails and the message reaches another worker, the worker's claim on the
// message id stops a second send. A receive whose answer is lost on its
// way back (the connection dropped mid-response) took its messages all the
// same; nobody holds their receipt handles, so they come back after
// VisibilityTimeout: a delay that long, never a loss. Settling:
//   - Ack deletes the message: the acks waiting at the same moment (up to
//     ten) go in one DeleteMessageBatch, each entry's result checked.
//   - Retry sends a copy with x-retry-count one higher, delayed by the
//     retry delay, and then deletes the original. SQS delays a message 15
//     minutes at most: a longer delay hops. The copy carries what is left
//     in x-retry-hold-ms, and on arrival it is sent again, delayed by up to
//     15 more minutes, until nothing is left; no clock is compared with
//     another. A FIFO queue has no per-message delay: its copy is made
//     invisible for the delay (12 hours at most) on its first receipt, and
//     handed to the worker on its second.
//   - DeadLetter sends a copy with the reason in x-last-error to the DLQ,
//     then deletes the original.
//   - Release(after) parks the message unchanged (retry count and reason
//     kept) until after has passed, holding no prefetch slot. Standard
//     queue: a copy delayed by after replaces it, a new message that no
//     redrive policy has counted. FIFO queue: it is made invisible for
//     after where it is, at the head of its group (its user's later
//     messages wait behind it, other users' go on); that costs a receipt,
//     so once its next receipt would pass half of MaxReceiveCount it is
//     sent as a held copy instead, with the group's messages this worker
//     received behind it copied after it, in order, and those it receives
//     next that were still ahead of the copy copied after them, until the
//     copy comes back. A parked notification never reaches the DLQ by the
//     redrive policy.
//
// On a FIFO queue one user's messages (one group) are handed to the
// worker one at a time, in the order SQS gave them, whichever receive
// brought them: the next only once the one before was settled and gone
// from the queue (acknowledged, retried, dead-lettered). When one stays in
// place (parked, held, left unsettled), those received behind it are handed
// back, so that SQS, which gives nothing of a group while one of its
// messages is in flight, gives them again after it. Different users' run
// side by side. MaxReceiveCount must be at least 4 there.
//
// A message that is not herald's (no valid herald-message-id) is
// dead-lettered with the reason. A queue deleted while herald runs is
// declared again on the next call that found it missing.
//
// When Consume's context ends it lets the receive under way finish (a
// receive cancelled on its way back would leave its messages invisible for
// a whole visibility timeout) and hands what it brought back, gives the
// handlers in flight ShutdownGrace before cancelling their context, and
// hands every message left unsettled or still queued behind its group
// back (visibility 0); one whose hand-back failed comes back after its
// visibility timeout. A stop takes
// at most about max(WaitTime, ShutdownGrace) + 2s: 7s by default.
package sqs
