// serve.js starts local-aws-sqs, the stricter SQS emulator of the SQS
// transport's tests, on 127.0.0.1 (port: the first argument, 0 for a free
// one) and prints "listening HOST:PORT" once it accepts connections. It
// exits when its standard input closes, so that it never outlives the
// test binary that started it (see sqstest's strict.go).
"use strict";

const http = require("http");
const { createRequestHandler } = require("local-aws-sqs");

const port = Number(process.argv[2] || 0);
const hostname = "127.0.0.1";

process.stdin.on("end", () => process.exit(0));
process.stdin.resume();

const { service, requestHandler } = createRequestHandler({
  port,
  hostname,
  // Tests delete a queue under a running herald and expect it declared
  // again at once; AWS makes a name wait 60s after a delete.
  emulateQueueCreationLifecycle: false,
  // A queue made here only to reach the queues' class (below).
  queues: [{ QueueName: "sqstest-unused" }],
});

// local-aws-sqs's long poll holds until it has as many messages as it was
// asked for (or its wait ends), where SQS answers as soon as it has one;
// and a message whose visibility runs out meanwhile is handed out again in
// the same answer. Here, as on SQS, a long poll answers with what a short
// receive (its wait 0: a 40ms look) finds as soon as it finds anything,
// trying again every 50ms until the wait ends.
const queueClass = Object.getPrototypeOf(service.Queues[0]);
const receive = queueClass.receive;
queueClass.receive = async function (params) {
  const wait = Number(params.WaitTimeSeconds ?? this.ReceiveMessageWaitTimeSeconds ?? 0);
  const deadline = Date.now() + wait * 1000;
  for (;;) {
    const got = await receive.call(this, { ...params, WaitTimeSeconds: 0 });
    if (got.length > 0 || Date.now() >= deadline) {
      return got;
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
};

const server = http.createServer(requestHandler);
server.on("error", (err) => {
  console.error(err);
  process.exit(1);
});
server.listen(port, hostname, () => {
  const a = server.address();
  service.PORT = a.port; // the queues' URLs name it
  process.stdout.write(`listening ${a.address}:${a.port}\n`);
});
