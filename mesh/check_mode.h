// Whether a communicator runs in checked mode, where the ranks agree on every collective's signature (see
// mesh/signature.h) before it runs.
#pragma once

namespace shardrt {

// SHARDRT_COMM_CHECK, when set, decides: "1" on, "0" off, so a job can be checked (or a check switched off)
// without a rebuild. Unset or empty, `requested` (CommOptions::check_collectives) decides. Another value is a
// ValueError rather than a silent default: ranks that read it differently would disagree on every collective.
bool comm_check_enabled(bool requested);

}  // namespace shardrt
