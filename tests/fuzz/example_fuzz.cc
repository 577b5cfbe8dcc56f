// SPDX-License-Identifier: Apache-2.0
// Fuzz target: a serialized tf.train.Example through the wire-format parser:
// parse_example, feature_names, find_feature(s) and each list decoder, with
// count_values checked against what the decoders produce.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dlfeed/format/example.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dlfeed;
  using namespace dlfeed::example;
  std::span<const std::byte> ex(reinterpret_cast<const std::byte*>(data), size);
  const Context ctx{"input.tfrecord", 1000};
  auto all = parse_example(ex, ctx);
  fuzz::check_error_names(all.status(), "input.tfrecord", "parse_example");
  auto names = feature_names(ex, ctx);
  fuzz::check_error_names(names.status(), "input.tfrecord", "feature_names");
  // feature_names reads only the keys, parse_example the values too: an
  // Example parse_example accepts must list the same names.
  if (all.ok()) {
    if (!names.ok()) fuzz::fail("parse_example accepts an Example feature_names refuses: " + names.status().ToString());
    std::set<std::string> parsed;
    for (const auto& [name, feature] : *all) parsed.insert(name);
    if (parsed != std::set<std::string>(names->begin(), names->end())) {
      fuzz::fail("parse_example and feature_names list different features");
    }
  }
  if (!names.ok()) return 0;
  if (std::set<std::string>(names->begin(), names->end()).size() != names->size()) {
    fuzz::fail("feature_names listed a name twice");
  }
  // One walk for every name finds what find_feature finds for each.
  const std::vector<absl::string_view> views(names->begin(), names->end());
  std::vector<FeatureSlice> slices(views.size());
  const absl::Status one_walk = find_features(ex, views, slices, ctx);
  fuzz::check_error_names(one_walk, "input.tfrecord", "find_features");
  for (size_t i = 0; one_walk.ok() && i < views.size(); ++i) {
    auto f = find_feature(ex, views[i], ctx);
    if (!f.ok() || f->kind != slices[i].kind || f->list.data() != slices[i].list.data() ||
        f->list.size() != slices[i].list.size()) {
      fuzz::fail("find_features and find_feature found different slices");
    }
  }
  for (const std::string& name : *names) {
    auto f = find_feature(ex, name, ctx);
    fuzz::check_error_names(f.status(), "input.tfrecord", "find_feature");
    if (!f.ok()) continue;
    if (f->offset > size || f->list.size() > size - f->offset) fuzz::fail("find_feature: list outside the Example");
    auto count = count_values(*f, ctx);
    fuzz::check_error_names(count.status(), "input.tfrecord", "count_values");
    uint64_t decoded = 0;
    absl::Status st;
    switch (f->kind) {
      case FeatureKind::kBytes: {
        std::vector<std::span<const std::byte>> v;
        st = decode_bytes_list(*f, v, ctx);
        for (const auto& b : v) {
          if (b.data() < ex.data() || b.data() + b.size() > ex.data() + ex.size()) {
            fuzz::fail("decode_bytes_list: a value outside the Example");
          }
        }
        decoded = v.size();
        break;
      }
      case FeatureKind::kFloat: {
        std::vector<float> v;
        st = decode_float_list(*f, v, ctx);
        decoded = v.size();
        break;
      }
      case FeatureKind::kInt64: {
        std::vector<int64_t> v;
        st = decode_int64_list(*f, v, ctx);
        decoded = v.size();
        break;
      }
      case FeatureKind::kNone: break;
    }
    fuzz::check_error_names(st, "input.tfrecord", "decode list");
    if (st.ok() && count.ok() && f->kind != FeatureKind::kNone && *count != decoded) {
      fuzz::fail(absl::StrCat("count_values says ", *count, " values, the decoder gave ", decoded));
    }
  }
  return 0;
}
