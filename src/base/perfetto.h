/* perfetto.h: what loupe's Perfetto writer (export/perfetto_proto.c) and reader
 * (import/perfetto_proto.c) agree on. */
#ifndef LOUPE_BASE_PERFETTO_H
#define LOUPE_BASE_PERFETTO_H

/* The most packet sequences (distinct TracePacket.trusted_packet_sequence_id values) in one
 * trace. The reader refuses a trace with more (LOUPE_EFORMAT) after holding about 400 bytes for
 * each; the writer never writes more: past it, writer tracks share sequences, their events then
 * naming their track (TrackEvent.track_uuid) instead of taking the sequence's default. Perfetto's
 * own limit is the field's range (uint32, trace_packet.proto); its SDK gives each thread one. */
#define LOUPE__PERFETTO_MAX_SEQUENCES 65536

#endif
