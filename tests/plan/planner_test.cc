// SPDX-License-Identifier: Apache-2.0
// Read planning (src/plan/planner.h) on hand-built indices: which
// samples are read straight into the batch, how the rest coalesce, the
// sizes known before decode, and batches cut from an order cursor.

#include "plan/planner.h"

#include <memory>
#include <vector>

#include "dlfeed/order/order.h"
#include "gtest/gtest.h"

namespace dlfeed::plan {
namespace {

// Samples whose bytes are the sample (`identity`), or bytes that need a
// decode the loader cannot skip; one file's samples, listed by the test.
class TestSource : public SampleSource {
 public:
  explicit TestSource(bool identity) : identity_(identity) {}
  std::string layout() const override { return identity_ ? "raw" : "coded"; }
  std::string describe() const override { return layout(); }
  absl::StatusOr<DecodedSample> decode(const SampleRef& ref, std::span<std::byte> raw,
                                       std::vector<std::byte>&) const override {
    return DecodedSample{raw, ref.shape, ref.dtype};
  }
  bool is_identity(const SampleRef& ref) const override { return identity_ && ref.extents.size() == 1; }
  uint64_t num_samples() const override { return refs.size(); }
  void fill(uint64_t item, SampleRef& ref) const override {
    ref.extents = refs[item].extents;
    ref.shape = refs[item].shape;
    ref.dtype = refs[item].dtype;
  }
  std::vector<SampleRef> refs;

 private:
  bool identity_;
};

// An index of `files` files; add() appends samples to the last file.
struct IndexBuilder {
  SampleIndex index;
  bool identity;
  explicit IndexBuilder(bool identity = true) : identity(identity) {}
  void file(const std::string& name) {
    if (!index.files.empty()) index.file_begin.push_back(index.file_begin.back() + last().refs.size());
    index.files.push_back(name);
    index.sources.push_back(std::make_unique<TestSource>(identity));
  }
  TestSource& last() { return static_cast<TestSource&>(*index.sources.back()); }
  void add(std::initializer_list<Extent> extents, Shape shape) {
    SampleRef r;
    r.extents.assign(extents.begin(), extents.end());
    r.shape = std::move(shape);
    r.dtype = DType::u8();
    last().refs.push_back(std::move(r));
  }
  SampleIndex done() {
    index.file_begin.push_back(index.file_begin.back() + last().refs.size());
    EXPECT_TRUE(index.check().ok()) << index.check();
    return std::move(index);
  }
};

// Plans `ids` of a one-field index whose files are FileTable ids 0, 1, ...
struct OneField {
  std::vector<SampleIndex> indices;
  std::vector<std::vector<uint32_t>> file_ids;
  explicit OneField(SampleIndex idx) {
    file_ids.push_back({});
    for (uint32_t f = 0; f < idx.num_files(); ++f) file_ids[0].push_back(f);
    indices.push_back(std::move(idx));
  }
  std::shared_ptr<batch::Work> plan(std::vector<uint64_t> ids, prefetch::CoalesceOptions coalesce = {}) {
    Planner p(indices, file_ids, {static_cast<uint32_t>(ids.size()), false, coalesce}, nullptr);
    auto w = std::make_shared<batch::Work>();
    w->ids = std::move(ids);
    p.plan(*w);
    return w;
  }
};

TEST(Planner, SmallNeighboursAreCoalescedIsolatedOnesGoDirect) {
  IndexBuilder b;
  b.file("a");
  for (uint64_t k = 0; k < 10; ++k) b.add({{k * 1000, 1000}}, {1000});
  b.add({{1'000'000, 1000}}, {1000});  // sample 10: far from the rest
  OneField f(b.done());
  // Samples 0 and 1 are neighbours in the file, not in the batch.
  auto w = f.plan({1, 10, 0});
  EXPECT_EQ(w->direct, (std::vector<uint8_t>{0, 1, 0}));
  ASSERT_EQ(w->plan.reads.size(), 1u);
  EXPECT_EQ(w->plan.reads[0].offset, 0u);
  EXPECT_EQ(w->plan.reads[0].length, 2000u);
  ASSERT_EQ(w->direct_reads.size(), 1u);
  EXPECT_EQ(w->direct_reads[0].offset, 1'000'000u);
  EXPECT_EQ(w->direct_reads[0].length, 1000u);
  EXPECT_EQ(w->direct_reads[0].dest, 1000u) << "sample 10 is second in the batch";
  EXPECT_EQ(w->piece_begin, (std::vector<uint32_t>{0, 1, 1, 2}));
  EXPECT_EQ(w->out_offsets[0], (std::vector<uint64_t>{0, 1000, 2000, 3000}));
  EXPECT_EQ(w->ticket->bytes, 2000u + 3000u) << "read buffer + batch buffer";
}

TEST(Planner, NeighboursInFileAndBatchAreOneDirectRead) {
  IndexBuilder b;
  b.file("a");
  for (uint64_t k = 0; k < 10; ++k) b.add({{k * 1000, 1000}}, {1000});
  b.add({{1'000'000, 1000}}, {1000});
  b.add({{500'000, 1000}}, {1000});  // 11 and 12: far from the rest, neighbours of each other
  b.add({{501'000, 1000}}, {1000});
  OneField f(b.done());
  // 2, 3, 4 follow each other in file and batch; 12 then 11 only in the file.
  auto w = f.plan({2, 3, 4, 10, 12, 11});
  EXPECT_EQ(w->direct, (std::vector<uint8_t>{1, 1, 1, 1, 0, 0}));
  ASSERT_EQ(w->direct_reads.size(), 2u);
  EXPECT_EQ(w->direct_reads[0].offset, 2000u);
  EXPECT_EQ(w->direct_reads[0].length, 3000u);
  EXPECT_EQ(w->direct_reads[0].dest, 0u);
  EXPECT_EQ(w->direct_reads[1].offset, 1'000'000u);
  EXPECT_EQ(w->direct_reads[1].dest, 3000u);
  ASSERT_EQ(w->plan.reads.size(), 1u) << "11 and 12 still coalesce, then are copied";
  EXPECT_EQ(w->plan.reads[0].offset, 500'000u);
  EXPECT_EQ(w->plan.reads[0].length, 2000u);
  EXPECT_EQ(w->ticket->bytes, 2000u + 6000u);

  prefetch::CoalesceOptions off;
  off.enabled = false;
  auto each = f.plan({2, 3, 4}, off);
  EXPECT_EQ(each->direct_reads.size(), 3u) << "no coalescing: a read per sample";
}

TEST(Planner, TheGapDecidesWhoIsANeighbour) {
  IndexBuilder b;
  b.file("a");
  b.add({{0, 100}}, {100});
  b.add({{100 + 5000, 100}}, {100});
  OneField f(b.done());
  prefetch::CoalesceOptions c;
  c.adaptive_gap = false;  // max_gap alone
  c.max_gap = 4999;
  EXPECT_EQ(f.plan({0, 1}, c)->direct, (std::vector<uint8_t>{1, 1}));
  c.max_gap = 5000;
  auto w = f.plan({0, 1}, c);
  EXPECT_EQ(w->direct, (std::vector<uint8_t>{0, 0}));
  ASSERT_EQ(w->plan.reads.size(), 1u);
  EXPECT_EQ(w->plan.reads[0].length, 5200u) << "the gap is read with them";
}

TEST(Planner, AnAdaptiveGapIsAtMostTheBatchsMeanExtent) {
  // Samples of two 500-byte extents (not raw, so none goes direct), 500 and
  // 501 bytes apart: with a 64 KiB max_gap, a fixed gap reads both gaps, the
  // adaptive one (the mean extent, 500) only the first.
  IndexBuilder b;
  b.file("a");
  b.add({{0, 500}, {500, 500}}, {1000});
  b.add({{1500, 500}, {2000, 500}}, {1000});
  b.add({{3001, 500}, {3501, 500}}, {1000});
  OneField f(b.done());
  prefetch::CoalesceOptions c;
  c.adaptive_gap = false;
  auto w = f.plan({0, 1, 2}, c);
  ASSERT_EQ(w->plan.reads.size(), 1u);
  EXPECT_EQ(w->plan.reads[0].length, 4001u) << "a fixed 64 KiB gap reads both gaps";
  c.adaptive_gap = true;
  w = f.plan({0, 1, 2}, c);
  ASSERT_EQ(w->plan.reads.size(), 2u);
  EXPECT_EQ(w->plan.reads[0].length, 2500u) << "a 500-byte gap is within the mean extent";
  EXPECT_EQ(w->plan.reads[1].offset, 3001u) << "a 501-byte gap is not";
  EXPECT_EQ(w->plan.buffer_bytes, 3500u);
  c.max_gap = 100;  // the smaller of the two
  EXPECT_EQ(f.plan({0, 1, 2}, c)->plan.reads.size(), 3u);
}

TEST(Planner, LargeRawSamplesAlwaysGoDirectAndRunsInBatchOrderMerge) {
  IndexBuilder b;
  b.file("a");
  const uint64_t n = kDirectMinBytes + 100;
  for (uint64_t k = 0; k < 4; ++k) b.add({{k * n, n}}, {static_cast<int64_t>(n)});
  OneField f(b.done());
  auto w = f.plan({0, 1, 2});
  EXPECT_EQ(w->direct, (std::vector<uint8_t>{1, 1, 1})) << "large neighbours still skip the copy";
  EXPECT_TRUE(w->plan.reads.empty());
  ASSERT_EQ(w->direct_reads.size(), 1u) << "neighbours in file and batch: one run";
  EXPECT_EQ(w->direct_reads[0].length, 3 * n);
  EXPECT_EQ(w->ticket->bytes, 3 * n);
  // Out of order: 2 lands first, then 0 and 1 (neighbours in both) as one run.
  w = f.plan({2, 0, 1});
  ASSERT_EQ(w->direct_reads.size(), 2u);
  EXPECT_EQ(w->direct_reads[0].offset, 2 * n);
  EXPECT_EQ(w->direct_reads[0].dest, 0u);
  EXPECT_EQ(w->direct_reads[1].offset, 0u);
  EXPECT_EQ(w->direct_reads[1].length, 2 * n);
  EXPECT_EQ(w->direct_reads[1].dest, n);
}

TEST(Planner, CoalescingOffReadsEveryRawSampleDirectOnItsOwn) {
  IndexBuilder b;
  b.file("a");
  b.add({{0, 100}}, {100});
  b.add({{100, 100}}, {100});
  OneField f(b.done());
  prefetch::CoalesceOptions c;
  c.enabled = false;
  auto w = f.plan({0, 1}, c);
  EXPECT_EQ(w->direct, (std::vector<uint8_t>{1, 1}));
  EXPECT_EQ(w->direct_reads.size(), 2u);
  EXPECT_TRUE(w->plan.reads.empty());
}

TEST(Planner, CodedSamplesAndUnknownSizesAreNeverDirect) {
  IndexBuilder coded(/*identity=*/false);
  coded.file("a");
  coded.add({{0, 100}}, {100});
  coded.add({{1'000'000, 100}}, {100});
  OneField f(coded.done());
  auto w = f.plan({0, 1});
  EXPECT_EQ(w->direct, (std::vector<uint8_t>{0, 0}));
  EXPECT_EQ(w->plan.reads.size(), 2u);

  IndexBuilder unknown;
  unknown.file("b");
  unknown.add({{0, 300}}, {-1});
  unknown.add({{1'000'000, 500}}, {-1});
  OneField g(unknown.done());
  w = g.plan({0, 1});
  EXPECT_EQ(w->known, (std::vector<uint8_t>{0}));
  EXPECT_EQ(w->direct, (std::vector<uint8_t>{0, 0}));
  EXPECT_TRUE(w->out_offsets[0].empty());
  EXPECT_EQ(w->unknown_bytes[0], 800u) << "the bytes read: the decoded size's hint";
  EXPECT_EQ(w->ticket->bytes, 800u + 800u);
}

TEST(Planner, ASampleOfSeveralExtentsIsGatheredFromItsPieces) {
  IndexBuilder b;
  b.file("a");
  b.add({{0, 10}, {1'000'000, 20}}, {30});
  b.add({{5'000'000, 40}}, {40});
  OneField f(b.done());
  auto w = f.plan({0, 1});
  EXPECT_EQ(w->direct, (std::vector<uint8_t>{0, 1}));
  EXPECT_EQ(w->piece_begin, (std::vector<uint32_t>{0, 2, 2}));
  ASSERT_EQ(w->plan.pieces.size(), 2u);
  EXPECT_EQ(w->plan.pieces[0].length, 10u);
  EXPECT_EQ(w->plan.pieces[1].length, 20u);
}

TEST(Planner, FieldsReadTheirOwnFileIds) {
  IndexBuilder x, y;
  x.file("x");
  y.file("y");
  for (uint64_t k = 0; k < 2; ++k) {
    x.add({{k * 100, 100}}, {100});
    y.add({{k * 8, 8}}, {8});
  }
  std::vector<SampleIndex> indices;
  indices.push_back(x.done());
  indices.push_back(y.done());
  const std::vector<std::vector<uint32_t>> file_ids = {{7}, {3}};
  Planner p(indices, file_ids, {2, false, {}}, nullptr);
  batch::Work w;
  w.ids = {1, 0};  // neighbours in each file, not in the batch: coalesced, then copied
  p.plan(w);
  ASSERT_EQ(w.plan.reads.size(), 2u) << "two files, each coalesced";
  EXPECT_EQ(w.plan.reads[0].file, 3u);
  EXPECT_EQ(w.plan.reads[0].length, 16u);
  EXPECT_EQ(w.plan.reads[1].file, 7u);
  EXPECT_EQ(w.plan.reads[1].length, 200u);
  // Slot (batch sample 0 = id 1, field 1) starts 8 bytes into file 3's read.
  EXPECT_EQ(w.plan.pieces[w.piece_begin[0 * 2 + 1]].buffer_offset, w.plan.reads[0].buffer_offset + 8);
  EXPECT_EQ(p.extents(), 4u);
  EXPECT_EQ(p.planned_reads(), 2u);

  // In order, each field's samples are one direct read of its own file,
  // though the fields' slots alternate (sample 0 x, sample 0 y, sample 1 x...).
  batch::Work in_order;
  in_order.ids = {0, 1};
  p.plan(in_order);
  EXPECT_TRUE(in_order.plan.reads.empty());
  ASSERT_EQ(in_order.direct_reads.size(), 2u);
  EXPECT_EQ(in_order.direct_reads[0].file, 7u);
  EXPECT_EQ(in_order.direct_reads[0].length, 200u);
  EXPECT_EQ(in_order.direct_reads[0].field, 0u);
  EXPECT_EQ(in_order.direct_reads[1].file, 3u);
  EXPECT_EQ(in_order.direct_reads[1].length, 16u);
  EXPECT_EQ(in_order.direct_reads[1].field, 1u);
  EXPECT_EQ(p.planned_reads(), 4u);
}

TEST(Planner, NextCutsBatchesFromTheCursor) {
  IndexBuilder b;
  b.file("a");
  for (uint64_t k = 0; k < 10; ++k) b.add({{k * 10, 10}}, {10});
  OneField f(b.done());
  OrderSpec spec;
  spec.strategy = "sequential";
  for (bool drop_last : {true, false}) {
    auto cursor = OrderCursor::create(FileLayout::of(f.indices[0]), spec);
    ASSERT_TRUE(cursor.ok()) << cursor.status();
    Planner p(f.indices, f.file_ids, {4, drop_last, {}}, nullptr);
    uint64_t index = 5;
    auto w0 = p.next(*cursor, 3, index);
    ASSERT_NE(w0, nullptr);
    EXPECT_EQ(w0->epoch, 3u);
    EXPECT_EQ(w0->index, 5u);
    EXPECT_EQ(w0->position, 0u);
    EXPECT_EQ(w0->ids, (std::vector<uint64_t>{0, 1, 2, 3}));
    auto w1 = p.next(*cursor, 3, index);
    ASSERT_NE(w1, nullptr);
    EXPECT_EQ(w1->position, 4u);
    EXPECT_EQ(index, 7u);
    auto w2 = p.next(*cursor, 3, index);
    if (drop_last) {
      EXPECT_EQ(w2, nullptr) << "a short last batch is dropped";
      EXPECT_EQ(index, 7u);
    } else {
      ASSERT_NE(w2, nullptr);
      EXPECT_EQ(w2->ids, (std::vector<uint64_t>{8, 9}));
      EXPECT_EQ(p.next(*cursor, 3, index), nullptr);
    }
  }
}

}  // namespace
}  // namespace dlfeed::plan
