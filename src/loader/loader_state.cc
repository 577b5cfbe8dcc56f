// SPDX-License-Identifier: Apache-2.0
#include "loader/loader_state.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "dlfeed/error.h"

namespace dlfeed::inline DLFEED_ABI {
namespace {

constexpr char kMagic[] = "dlfL";
constexpr size_t kHeaderBytes = 5;  // magic, version

}  // namespace

bool is_loader_state(absl::string_view bytes) {
  return bytes.size() >= kHeaderBytes && bytes.substr(0, 4) == absl::string_view(kMagic, 4);
}

absl::StatusOr<LoaderState> decode_loader_state(absl::string_view bytes) {
  if (!is_loader_state(bytes)) {
    return absl::InvalidArgumentError("loader state: not a dlfeed loader state (bad magic)");
  }
  LoaderState s;
  s.version = static_cast<uint8_t>(bytes[4]);
  if (s.version != kLoaderStateVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("loader state: version ", static_cast<int>(s.version), ", expected ", int(kLoaderStateVersion)));
  }
  DLFEED_ASSIGN_OR_RETURN(s.order, decode_state(bytes.substr(kHeaderBytes)));
  return s;
}

namespace detail {

std::string encode_loader_state(absl::string_view order_state) {
  std::string out(kMagic, 4);
  out.push_back(static_cast<char>(kLoaderStateVersion));
  out.append(order_state.data(), order_state.size());
  return out;
}

std::string loader_state_at(const FileLayout& layout, const OrderSpec& spec, const OrderCursor* base,
                            uint64_t position) {
  if (base == nullptr) {
    OrderSpec first = spec;
    first.epoch = 0;
    auto c = OrderCursor::create(layout, first);
    return encode_loader_state(c.ok() ? c->state() : "");
  }
  OrderCursor c = *base;
  (void)c.seek(std::min(position, c.size()));
  return encode_loader_state(c.state());
}

absl::StatusOr<ResumePoint> resume_point(absl::string_view state, const FileLayout& layout, const OrderSpec& want) {
  DLFEED_ASSIGN_OR_RETURN(LoaderState ls, decode_loader_state(state));
  const OrderState& os = ls.order;
  // The parameters the strategy reads (not those it ignores), and an
  // explicit order's index array.
  const std::string saved = describe_order(os.spec, os.indices_fingerprint);
  const std::string here = describe_order(want, indices_fingerprint(want.params.indices.get()));
  if (saved != here) {
    return absl::InvalidArgumentError(absl::StrCat("loader state: saved with ", saved, ", but this loader has ", here));
  }
  ResumePoint r{os.spec.epoch, os.spec.global_start, os.position};
  if (os.spec.rank == want.rank && os.spec.world_size == want.world_size) {
    // Checks the dataset's file layout against the state's fingerprint.
    const std::string order_state(state.substr(kHeaderBytes));
    DLFEED_RETURN_IF_ERROR(OrderCursor::from_state(layout, order_state, want.params.indices).status());
    return r;
  }
  // Elastic: the job consumed global positions [0, G + k*W); this rank reads
  // its share of the rest.
  if (os.layout_fingerprint != layout.fingerprint()) {
    return absl::FailedPreconditionError(
        "loader state: saved for a different file layout (dataset changed since the state was saved)");
  }
  r.global_start = os.spec.global_start + os.position * os.spec.world_size;
  r.position = 0;
  OrderSpec old = want;
  old.rank = os.spec.rank;
  old.world_size = os.spec.world_size;
  old.epoch = os.spec.epoch;
  old.global_start = os.spec.global_start;
  if (auto before = OrderCursor::create(layout, old); before.ok()) {
    const bool partitioned = !before->global_order().rank_bounds().empty();
    if (partitioned && os.position > 0 && os.position < before->size()) {
      // Mid-epoch: k steps of W ranks are no global position of an order
      // partitioned by rank (each rank's part is padded to the largest),
      // and G + k*W may pass its size while samples are left: refused,
      // never read as spent.
      return absl::FailedPreconditionError(absl::StrCat(
          "loader state: saved by rank ", os.spec.rank, " of ", os.spec.world_size, ", restored on rank ", want.rank,
          " of ", want.world_size, ": strategy '", want.strategy,
          "' partitions samples by rank (its order depends on the world size), so it resumes on another world size "
          "from an epoch's start or end only; this state is at position ",
          os.position, " of ", before->size(), " in epoch ", os.spec.epoch,
          " (elastic restarts mid-epoch need a strided order)"));
    }
    // A state taken at its epoch's end: the old job read that epoch whole
    // (what shard_drop_last dropped to keep the shards equal included), so
    // nothing of it is left on any world size, and the next epoch is read
    // whole. (G + k*W alone left the dropped tail, a step of the finished
    // epoch on fewer ranks.) An order partitioned by rank has no global
    // positions to resume from mid-epoch; its start (G = 0) is one.
    if (os.position >= before->size() && before->size() > 0) {
      r.global_start = std::max<uint64_t>(1, before->global_order().size());
    }
  }
  OrderSpec spec = want;
  spec.epoch = os.spec.epoch;
  spec.global_start = r.global_start;
  auto check = OrderCursor::create(layout, spec);
  if (!check.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("loader state: saved by rank ", os.spec.rank, " of ",
                                                      os.spec.world_size, ", restored on rank ", want.rank, " of ",
                                                      want.world_size, ": ", check.status().message()));
  }
  return r;
}

}  // namespace detail
}  // namespace dlfeed
