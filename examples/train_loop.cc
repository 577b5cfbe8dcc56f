// SPDX-License-Identifier: Apache-2.0
// A C++ training loop fed by dlfeed: a linear model y = w . x + b learns the
// labels of a dataset by SGD (normalised least mean squares). Give the
// dataset, its input and label fields (default x,y; any numeric dtype), and
// the epochs:
//
//   dlfeed generate --format npz --dir data/ex --files 8 --samples-per-file 64 --shape 16 --dtype float32
//   build/examples/train_loop data/ex                       # NPZ members x, y
//   build/examples/train_loop data/d/train records_0,labels 2   # the README's DLIO-layout HDF5
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "dlfeed/loader.h"

namespace {

// Element i of a field as a double, for every little-endian numeric dtype.
double element(const dlfeed::BatchField& f, size_t i) {
  const std::byte* p = f.bytes.data() + i * f.dtype.size;
  auto load = [p](auto v) {
    std::memcpy(&v, p, sizeof(v));
    return static_cast<double>(v);
  };
  using K = dlfeed::DType::Kind;
  switch (f.dtype.size) {
    case 1: return f.dtype.kind == K::kInt ? load(int8_t{}) : load(uint8_t{});
    case 2: return f.dtype.kind == K::kInt ? load(int16_t{}) : load(uint16_t{});
    case 4:
      return f.dtype.kind == K::kFloat ? load(float{}) : f.dtype.kind == K::kInt ? load(int32_t{}) : load(uint32_t{});
    default:
      return f.dtype.kind == K::kFloat ? load(double{}) : f.dtype.kind == K::kInt ? load(int64_t{}) : load(uint64_t{});
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DATASET [X_FIELD,Y_FIELD (default x,y)] [EPOCHS (default 3)]\n", argv[0]);
    return 2;
  }
  std::string x_field = "x", y_field = "y";
  if (argc > 2) {
    const std::string fields = argv[2];
    const size_t comma = fields.find(',');
    if (comma == std::string::npos) {
      std::fprintf(stderr, "fields '%s': expected X_FIELD,Y_FIELD (e.g. records_0,labels)\n", argv[2]);
      return 2;
    }
    x_field = fields.substr(0, comma);
    y_field = fields.substr(comma + 1);
  }
  dlfeed::LoaderOptions options;
  options.paths = {argv[1]};
  options.fields = {x_field, y_field};
  options.batch_size = 32;
  options.order.strategy = "global_shuffle";
  options.order.seed = 1;
  auto loader = dlfeed::Loader::create(options);
  if (!loader.ok()) {
    std::fprintf(stderr, "%s\n", loader.status().ToString().c_str());
    return 1;
  }
  const auto& specs = (*loader)->field_specs();
  for (size_t f = 0; f < specs.size(); ++f) {
    if (specs[f].dtype.big_endian || specs[f].dtype.kind == dlfeed::DType::Kind::kBool) {
      std::fprintf(stderr, "field %s: dtype %s: this example reads little-endian numbers only\n",
                   options.fields[f].c_str(), specs[f].dtype.name().c_str());
      return 1;
    }
  }
  const int epochs = argc > 3 ? std::atoi(argv[3]) : 3;
  std::vector<double> w;
  double b = 0;
  try {
    for (int e = 0; e < epochs; ++e) {
      double loss = 0;
      uint64_t n = 0;
      for (const auto& batch : (*loader)->epoch(e)) {
        const dlfeed::BatchField& x = batch->fields[0];
        const dlfeed::BatchField& y = batch->fields[1];
        const size_t dim = x.bytes.size() / x.dtype.size / batch->size();
        if (y.bytes.size() / y.dtype.size != batch->size()) {
          std::fprintf(stderr, "field %s: one number per sample expected (a label)\n", y_field.c_str());
          return 1;
        }
        // Integer inputs (image bytes) scaled to [0, 1].
        const double scale = x.dtype.kind == dlfeed::DType::Kind::kFloat ? 1.0 : 1.0 / 255.0;
        if (w.empty()) w.assign(dim, 0.0);
        std::vector<double> xi(dim);
        for (size_t i = 0; i < batch->size(); ++i) {
          double pred = b, norm = 1.0;
          for (size_t d = 0; d < dim; ++d) {
            xi[d] = element(x, i * dim + d) * scale;
            pred += w[d] * xi[d];
            norm += xi[d] * xi[d];
          }
          const double err = pred - element(y, i);
          loss += err * err;
          // Normalised LMS: a step that stays stable whatever the sample's size.
          const double lr = 0.5 / norm;
          for (size_t d = 0; d < dim; ++d) w[d] -= lr * err * xi[d];
          b -= lr * err;
          ++n;
        }
      }
      std::printf("epoch %d: mean squared error %.3f over %llu samples\n", e, loss / n,
                  static_cast<unsigned long long>(n));
    }
  } catch (const dlfeed::Error& err) {
    std::fprintf(stderr, "%s\n", err.what());
    return 1;
  }
  return 0;
}
