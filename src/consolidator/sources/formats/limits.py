"""Every bound on what a schema registry and the values it describes may cost, in one place.

The registry is input, not trust: Confluent's serializers register schemas on first use, so any
producer of the topic can put a schema there. Each bound below says what it protects and why
its value; docs/design/security.md (schema registries) lists them for the operator.
"""

from __future__ import annotations

#: Containers (Avro records, arrays and maps; Protobuf messages) a decoded value may nest. 100 is
#: the Protobuf runtime's own parse limit, so every format refuses at the same depth; the
#: Avro reader uses about three Python frames per level, far below Python's 1000, and never
#: recurses in C (fastavro's C reader crashes the process on a recursive schema and a deep
#: value).
MAX_DECODED_DEPTH = 100

#: Bytes of one registry answer, as received and once decompressed. Real schemas are a few to
#: tens of KiB; 256 KiB is ten times a large one, and with :data:`MAX_CACHED_SCHEMAS` it bounds
#: the schema text a process holds to 8 MiB.
MAX_SCHEMA_RESPONSE_BYTES = 256 * 1024

#: Bytes of the status line and headers of one registry answer (http.client reads at most 100
#: header lines of 64 KiB each otherwise).
MAX_RESPONSE_HEAD_BYTES = 64 * 1024

#: Schema readers kept per process (least recently used first out). A topic uses a handful of
#: schema versions; 32 of the largest schemas parsed stay within tens of MiB of a 512 MiB
#: function.
MAX_CACHED_SCHEMAS = 32

#: Failed lookups remembered per process (least recently used first out), each a short message:
#: enough for every id of a burst of bad records, bounded when ids are random.
MAX_REMEMBERED_FAILURES = 1024

#: A failed lookup (unknown id, registry down) is answered from memory this long, so a batch
#: of records naming it costs one registry call, not one per record.
RETRY_AFTER_SECONDS = 10.0

#: Share of the function's timeout the registry lookups of one ingest invocation may take in
#: all; past it, records whose schema is not cached wait for the next invocation. Half leaves
#: the other half for storing and dead-lettering what was decoded.
REGISTRY_SHARE_OF_FUNCTION_TIMEOUT = 0.5

#: JSON Schema keyword evaluations one value may cost: this many, plus
#: :data:`JSON_SCHEMA_STEPS_PER_BYTE` per byte of the value. A schema's ``$ref``s and ``allOf``s
#: can multiply its work (22 doubling levels take minutes on an empty object); at about 3 us a
#: keyword this stops a 1 KiB value within ~40 ms and a 256 KiB value within ~3 s, while a
#: real schema needs a few keywords per field.
JSON_SCHEMA_STEPS = 10_000
JSON_SCHEMA_STEPS_PER_BYTE = 4

#: Size of one compiled ``pattern`` (RE2 instructions). RE2 matches in time linear in the
#: text, times the program size at worst; real patterns compile to tens of instructions.
MAX_PATTERN_PROGRAM_SIZE = 10_000

#: Memory RE2 may use for one pattern (its automata); a pattern that needs more fails to
#: compile, which makes the schema unreadable.
MAX_PATTERN_MEMORY_BYTES = 1024 * 1024

#: Subjects (or Glue schema names) named in a message: a longer list is cut, with its count.
SHOWN_SUBJECTS = 5
