// SPDX-License-Identifier: Apache-2.0
// Private: records read around their value. A TFRecord Example holding a
// sample's bytes (DLIO's `image`) is a record whose value lies at the same
// place in every record of the same length. The planner reads such a
// record in one scattered read of three pieces: the value straight into its
// slot of the batch, the bytes before and after it into the read buffer
// (the value's CRC taken by the I/O backend as it lands). After that, the
// source checks the record from those pieces (its CRCs, the value's place in
// the Example) before anything of it is used; a record that does not pass is
// put back together and decoded as any other, so it gives the same result or
// the same error (docs/architecture.md, "Split records").
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "dlfeed/detail/export.h"
#include "dlfeed/sample.h"

namespace dlfeed::inline DLFEED_ABI::detail {

/// Where a sample's value lies within its one extent (the framed record).
struct ValueSpan {
  uint64_t offset = 0;
  uint64_t length = 0;
};

/// A sample source whose samples may be read around their value (SampleSource
/// implementations add it; the planner finds it with dynamic_cast).
class SplitRecords {
 public:
  virtual ~SplitRecords() = default;

  /// Where `ref`'s value lies in its extent, predicted from the index (the
  /// first record's layout); nullopt when the record is to be read whole.
  virtual std::optional<ValueSpan> value_span(const SampleRef& ref) const = 0;

  /// True when decode() of this source's samples reads only an Example's
  /// structure, never the bytes of another feature's value: it may decode a
  /// record whose split value is a hole (a record check_split passed).
  virtual bool parses_around_values(const SampleRef& ref) const = 0;

  /// True when check_split checks the record's CRCs: the planner then asks
  /// for the value's CRC32C as it is read (ReadRequest::checksum).
  virtual bool verifies_crc() const = 0;

  /// Checks a record read in pieces. `skeleton` is the whole record's size,
  /// its bytes in place except [span.offset, span.offset + span.length),
  /// whose bytes are `value` (elsewhere). True when its CRCs hold (when
  /// checked) and its Example has exactly that span as the sample's value,
  /// of the sample's kind, dtype and shape: then every Example parse of the
  /// skeleton reads what it would of the whole record. False otherwise: the
  /// caller decodes the whole record instead, which gives the error.
  /// `value_crc`: the CRC32C of `value`'s bytes, taken as they were read
  /// (then they are not read again for the check), or null.
  virtual bool check_split(const SampleRef& ref, std::span<const std::byte> skeleton, ValueSpan span,
                           std::span<const std::byte> value, const uint32_t* value_crc) const = 0;
};

}  // namespace dlfeed::detail
