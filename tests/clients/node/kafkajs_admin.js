// kafkajs admin client, default configuration. argv[2]: JSON {brokers, calls: [{method, args: [...]}]}: each
// admin[method](...args) in order. Prints one line per call, {"method", "ok": true, "result"} or
// {"method", "ok": false, "error": {...}}, then {"done": true}.
'use strict'
const { kafka, emit, describeError, spec } = require('./kafkajs_common')

async function main() {
  const s = spec()
  const admin = kafka(s, 'kafkajs-admin').admin()
  await admin.connect()
  try {
    for (const call of s.calls) {
      try {
        const result = await admin[call.method](...(call.args || []))
        emit({ method: call.method, ok: true, result: result === undefined ? null : result })
      } catch (e) {
        emit({ method: call.method, ok: false, error: describeError(e) })
      }
    }
  } finally {
    await admin.disconnect()
  }
  emit({ done: true })
}

main().catch(e => { emit({ fatal: describeError(e) }); process.exit(1) })
