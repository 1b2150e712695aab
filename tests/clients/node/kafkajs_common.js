// Shared by the kafkajs_*.js drivers: a kafkajs client with its default configuration (only clientId and the
// bootstrap brokers are given), kafkajs's own log lines on stderr, and the driver's JSON lines on stdout.
'use strict'
const { Kafka, logLevel } = require('kafkajs')

// kafkajs logs through console.info (stdout) by default; the drivers keep stdout for their JSON lines, so the
// same log entries go to stderr instead. Level and content are kafkajs's defaults.
const toStderr = () => ({ namespace, level, label, log }) => {
  const { message, ...extra } = log
  process.stderr.write(JSON.stringify({ level: label, namespace, message, ...extra }) + '\n')
}

function kafka(spec, clientId) {
  return new Kafka({ clientId, brokers: spec.brokers.split(','), logCreator: toStderr })
}

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n')
}

// What a client sees of an error: kafkajs's class name, the Kafka error name (type) and code of a protocol error,
// and the same for its cause when kafkajs wraps it (retries exhausted) and for each error of an aggregate.
function describeError(e) {
  if (e == null) return null
  return {
    name: e.name,
    type: e.type,
    code: e.code,
    retriable: e.retriable,
    message: e.message,
    cause: e.cause && e.cause !== e ? describeError(e.cause) : null,
    errors: Array.isArray(e.errors) ? e.errors.map(describeError) : undefined, // KafkaJSAggregateError
    topic: e.topic,
  }
}

function spec() {
  return JSON.parse(process.argv[2])
}

module.exports = { kafka, emit, describeError, spec, logLevel }
