// Telemetry under EAL: Tern's registry commands (telemetry/registry.h) as
// DPDK rte_telemetry commands, so that dpdk-telemetry.py shows them next to
// DPDK's own (/tern/engines, /tern/engine,0, /tern/conns,0, ...).
//
// DPDK cannot unregister a command, so each kind's commands stay registered
// for the life of the process; a source that is gone answers null. The
// providers run on DPDK's telemetry thread (see registry.h for what that
// allows them to read).
#pragma once

namespace tern::runtime {

// Registers every Tern command with rte_telemetry, now and as new kinds
// appear. Idempotent; needs EAL started with telemetry on
// (EalOptions::telemetry) for anyone to see them, but is harmless without.
void export_telemetry_to_eal();

}  // namespace tern::runtime
