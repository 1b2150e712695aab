// A kafkajs consumer in a group, default configuration (range then round-robin assignors, autoCommit after each
// batch, 30 s session, 3 s heartbeats), subscribed from the beginning (a new group starts at the earliest offsets).
// argv[2]: JSON {brokers, groupId, topic, name}. A line "stop" on stdin (or stdin closing) makes it disconnect:
// it commits and leaves the group (LeaveGroup), then exits 0.
// Prints JSON lines: {"event": "join", memberId, leaderId, isLeader, assigned: {partition numbers}},
// {"event": "record", partition, offset, value}, {"event": "commit", offsets: [[partition, offset]...]},
// {"event": "rebalancing"}, {"event": "crash", error}, {"event": "stopped"}.
'use strict'
const readline = require('readline')
const { kafka, emit, describeError, spec } = require('./kafkajs_common')

async function main() {
  const s = spec()
  const consumer = kafka(s, s.name).consumer({ groupId: s.groupId })
  const { GROUP_JOIN, COMMIT_OFFSETS, REBALANCING, CRASH } = consumer.events
  consumer.on(GROUP_JOIN, ({ payload }) => emit({
    event: 'join', memberId: payload.memberId, leaderId: payload.leaderId, isLeader: payload.isLeader,
    protocol: payload.groupProtocol, assigned: (payload.memberAssignment[s.topic] || []).slice().sort((a, b) => a - b),
  }))
  consumer.on(COMMIT_OFFSETS, ({ payload }) => emit({
    event: 'commit', generation: payload.groupGenerationId,
    offsets: payload.topics.flatMap(t => t.partitions.map(p => [Number(p.partition), Number(p.offset)])),
  }))
  consumer.on(REBALANCING, () => emit({ event: 'rebalancing' }))
  consumer.on(CRASH, ({ payload }) => emit({ event: 'crash', error: describeError(payload.error),
                                             restart: payload.restart }))

  let stopping = null
  const stop = () => {
    if (!stopping) {
      stopping = consumer.disconnect().then(() => { emit({ event: 'stopped' }); process.exit(0) },
                                            e => { emit({ event: 'stop-failed', error: describeError(e) }); process.exit(1) })
    }
  }
  const rl = readline.createInterface({ input: process.stdin })
  rl.on('line', line => { if (line.trim() === 'stop') stop() })
  rl.on('close', stop)

  await consumer.connect()
  await consumer.subscribe({ topics: [s.topic], fromBeginning: true })
  await consumer.run({
    eachMessage: async ({ partition, message }) => {
      emit({ event: 'record', partition, offset: Number(message.offset), value: message.value.toString() })
    },
  })
}

main().catch(e => { emit({ event: 'fatal', error: describeError(e) }); process.exit(1) })
