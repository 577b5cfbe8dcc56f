// SPDX-License-Identifier: Apache-2.0
#include "index/folder_walk.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "dlfeed/detail/error.h"
#include "dlfeed/error.h"
#include "format/paths.h"

namespace dlfeed::inline DLFEED_ABI::detail {
namespace fs = std::filesystem;

bool in_folder_listing(const std::string& path, FileFormat format) {
  auto got = detect_format(path);
  if (got.ok()) return format == FileFormat::kAuto || *got == format;
  // With an explicit format, a file with no extension at all is taken too
  // (TFRecord shards are often named "train-00000-of-01024"); one with an
  // unknown extension (.idx, .txt, .json, ...) or a hidden one is not.
  const std::string name = fs::path(path).filename().string();
  return format != FileFormat::kAuto && !name.empty() && name[0] != '.' && name.find('.') == std::string::npos;
}

namespace {

bool hidden(const fs::path& p) {
  const std::string name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

// One walk of folder `p`: the folders inside it first, then each directory
// link met (walked after them, so a link never stands in for the folder it
// leads to), unless it leads back to the folder or above it, or to a folder
// walked already (each folder once, by device and inode: no file twice, no
// walk ending in ELOOP). The folder named may itself be a link (a DLIO
// train/ linked elsewhere).
struct Walk {
  Walk(const std::string& path, const FormatOptions& format, Gathered& gathered, std::vector<std::string>& out)
      : p(path), options(format), g(gathered), found(out) {}

  const std::string& p;
  const FormatOptions& options;
  Gathered& g;
  std::vector<std::string>& found;
  const std::string root = real_path(p);
  int noted = 0;
  absl::flat_hash_set<std::pair<dev_t, ino_t>> walked;
  std::vector<std::string> links;  // directory links met, walked after the folders

  // Says what a link that is not followed is, so that a file missing from
  // the dataset has a reason in the run's output (at most 8 a walk).
  void note_link(const std::string& link, absl::string_view why) {
    constexpr int kMostNoted = 8;
    if (noted < kMostNoted) {
      std::fprintf(stderr, "dlfeed: note: %s: skipped %s: %s\n", p.c_str(), link.c_str(), std::string(why).c_str());
    } else if (noted == kMostNoted) {
      std::fprintf(stderr, "dlfeed: note: %s: more links skipped, not named\n", p.c_str());
    }
    ++noted;
  }

  // The folder `top` and below, but for directory links (queued).
  absl::Status tree(const std::string& top, bool linked) {
    std::error_code ec;
    auto it = fs::recursive_directory_iterator(top, fs::directory_options::skip_permission_denied, ec);
    if (ec) return io_error(top, "opendir", ec.value());
    // The entry's type comes from the directory listing (d_type): no stat
    // per entry, but for links and file systems that leave it unknown.
    for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (ec) return io_error(top, "readdir", ec.value());
      // Hidden names are no data: .ipynb_checkpoints/, macOS's ._x.npy, an editor's .x.npy.swp.
      if (hidden(it->path())) {
        if (it->is_directory(ec)) it.disable_recursion_pending();
        continue;
      }
      const bool link = it->is_symlink(ec);
      if (link) {
        std::error_code lec;
        const bool there = fs::exists(it->path(), lec);
        if (!there) {
          // Named when it might have been data (an editor's lock link is not).
          if (in_folder_listing(it->path().string(), options.format) || it->path().extension().empty()) {
            note_link(it->path().string(), lec ? absl::StrCat("a link that cannot be followed (", lec.message(), ")")
                                               : std::string("a broken link (its target does not exist)"));
          }
          continue;
        }
      }
      if (it->is_directory(ec)) {
        if (link) {
          links.push_back(it->path().string());  // not recursed into now (links are not followed here)
          continue;
        }
        struct stat st;
        if (it->path().filename() == "index" || it->path().filename() == detail::kCacheFolder ||
            (::stat(it->path().c_str(), &st) == 0 && !walked.insert({st.st_dev, st.st_ino}).second)) {
          it.disable_recursion_pending();  // DLIO's TFRecord sidecars, the index cache, a folder seen (a bind mount)
          continue;
        }
        if (g.stamp) g.listing.folders.push_back(detail::stamp_folder(it->path().string(), g.listed_at_ns));
        g.listed_folders.insert(it->path().string());
        continue;
      }
      if (!it->is_regular_file(ec)) continue;
      const std::string s = it->path().string();
      if (absl::EndsWith(s, ".idx")) g.idx_folders.insert(it->path().parent_path().string());
      if (!in_folder_listing(s, options.format)) continue;  // not a data file (.idx, logs, ...)
      if (link || linked) g.through_links.insert(s);
      found.push_back(s);
    }
    return absl::OkStatus();
  }

  absl::Status run() {
    if (struct stat st; ::stat(p.c_str(), &st) == 0) walked.insert({st.st_dev, st.st_ino});
    DLFEED_RETURN_IF_ERROR(tree(p, false));
    for (size_t k = 0; k < links.size(); ++k) {  // a linked folder's own links join the queue
      const std::string link = links[k];
      const std::string target = real_path(link);
      const std::string name = fs::path(link).filename().string(), target_name = fs::path(target).filename().string();
      if (name == "index" || name == detail::kCacheFolder || target_name == "index" ||
          target_name == detail::kCacheFolder) {
        continue;
      }
      if (!root.empty() && !target.empty() && path_within(root, target)) {
        note_link(link, absl::StrCat("a link to ", target, ", which holds this dataset folder (not walked again)"));
        continue;
      }
      struct stat st;
      if (::stat(link.c_str(), &st) == 0 && !walked.insert({st.st_dev, st.st_ino}).second) {
        note_link(link, absl::StrCat("a link to ", target, ", a folder walked already"));
        continue;
      }
      if (g.stamp) g.listing.folders.push_back(detail::stamp_folder(link, g.listed_at_ns));
      g.listed_folders.insert(link);
      DLFEED_RETURN_IF_ERROR(tree(link, true));
    }
    return absl::OkStatus();
  }
};

}  // namespace

absl::Status walk_folder(const std::string& p, const FormatOptions& options, Gathered& g,
                         std::vector<std::string>& found) {
  return Walk{p, options, g, found}.run();
}

void read_each_file_once(const std::string& p, Gathered& g, std::vector<std::string>& found) {
  if (!g.through_links.empty()) {
    // A file reached directly and again through a link (or twice through
    // links) is one file: the path reached without a link is kept, else the
    // first in order.
    absl::flat_hash_set<std::pair<dev_t, ino_t>> seen;
    std::vector<std::string> once;
    once.reserve(found.size());
    uint64_t dropped = 0;
    std::string example;
    for (const bool linked : {false, true}) {
      for (std::string& f : found) {
        if (g.through_links.contains(f) != linked) continue;
        struct stat st;
        if (::stat(f.c_str(), &st) == 0 && !seen.insert({st.st_dev, st.st_ino}).second) {
          if (dropped++ == 0) example = f;
          continue;
        }
        once.push_back(std::move(f));
      }
    }
    std::sort(once.begin(), once.end());
    found = std::move(once);
    if (dropped > 0) {
      std::fprintf(stderr, "dlfeed: note: %s: %llu files reached twice (through links; e.g. %s) are read once\n",
                   p.c_str(), static_cast<unsigned long long>(dropped), example.c_str());
    }
  }
}

}  // namespace dlfeed::detail
