// A C++ training loop fed by dlfeed: a linear model y = w . x + b learns the
// labels of a generated dataset by SGD. Run it on any dataset with fields x
// (float32 samples) and y (int64 labels):
//
//   dlfeed generate --format npz --dir data/ex --files 8 --samples-per-file 64 --shape 16 --dtype float32
//   build/examples/train_loop data/ex
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "dlfeed/loader.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DATASET [epochs]\n", argv[0]);
    return 2;
  }
  dlfeed::LoaderOptions options;
  options.paths = {argv[1]};
  options.fields = {"x", "y"};
  options.batch_size = 32;
  options.order.strategy = "global_shuffle";
  options.order.seed = 1;
  auto loader = dlfeed::Loader::create(options);
  if (!loader.ok()) {
    std::fprintf(stderr, "%s\n", loader.status().ToString().c_str());
    return 1;
  }
  const int epochs = argc > 2 ? std::atoi(argv[2]) : 3;
  std::vector<double> w;
  double b = 0;
  try {
    for (int e = 0; e < epochs; ++e) {
      double loss = 0;
      uint64_t n = 0;
      for (const auto& batch : (*loader)->epoch(e)) {
        const dlfeed::BatchField& x = batch->fields[0];
        const dlfeed::BatchField& y = batch->fields[1];
        const auto xs = x.as<float>();
        const auto ys = y.as<int64_t>();
        const size_t dim = xs.size() / batch->size();
        if (w.empty()) w.assign(dim, 0.0);
        for (size_t i = 0; i < batch->size(); ++i) {
          double pred = b;
          for (size_t d = 0; d < dim; ++d) pred += w[d] * xs[i * dim + d];
          const double err = pred - static_cast<double>(ys[i]);
          loss += err * err;
          for (size_t d = 0; d < dim; ++d) w[d] -= 1e-3 * err * xs[i * dim + d];
          b -= 1e-3 * err;
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
