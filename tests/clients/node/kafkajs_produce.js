// kafkajs producer, default configuration (acks -1, its default partitioner, retries, no idempotence).
// argv[2]: JSON {brokers, producer?: {allowAutoTopicCreation}, sends: [{topic, messages?: [{key, value, partition}],
//   count?, prefix?, partitions?, chunk?, valueBytes?}]}; a send with count makes values prefix-i for i < count on
//   partition i % partitions, sent chunk (default 100) per producer.send(); valueBytes makes one value of that size.
// Prints one line per producer.send(): {"send", "topic", "ok": true, "sent": [[partition, value]...],
//   "results": [{partition, baseOffset}]} or {"send", "topic", "ok": false, "error": {...}}; then {"done": true}.
'use strict'
const { kafka, emit, describeError, spec } = require('./kafkajs_common')

async function main() {
  const s = spec()
  const producer = kafka(s, 'kafkajs-producer').producer(s.producer || {})
  await producer.connect()
  let n = 0
  try {
    for (const send of s.sends) {
      const chunks = []
      if (send.messages) chunks.push(send.messages)
      if (send.valueBytes) chunks.push([{ value: 'x'.repeat(send.valueBytes), partition: send.partition }])
      if (send.count) {
        const size = send.chunk || 100
        for (let i = 0; i < send.count; i += size) {
          const chunk = []
          for (let j = i; j < Math.min(send.count, i + size); j++) {
            chunk.push({ key: `k${j}`, value: `${send.prefix}-${j}`, partition: j % send.partitions })
          }
          chunks.push(chunk)
        }
      }
      for (const messages of chunks) {
        const sent = messages.map(m => [m.partition, m.value.length > 64 ? `<${m.value.length} bytes>` : m.value])
        try {
          const results = await producer.send({ topic: send.topic, messages })
          emit({ send: n, topic: send.topic, ok: true, sent,
                 results: results.map(r => ({ partition: r.partition, baseOffset: Number(r.baseOffset),
                                              errorCode: r.errorCode })) })
        } catch (e) {
          emit({ send: n, topic: send.topic, ok: false, error: describeError(e) })
        }
        n++
      }
    }
  } finally {
    await producer.disconnect()
  }
  emit({ done: true })
}

main().catch(e => { emit({ fatal: describeError(e) }); process.exit(1) })
