// SPDX-License-Identifier: Apache-2.0
// The read-only object driver: hdf5_object.h.

#include "format/hdf5_object.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dlfeed/detail/file.h"
#include "dlfeed/error.h"
#include "dlfeed/io/object_store.h"

namespace dlfeed::inline DLFEED_ABI::detail::h5 {
namespace {

thread_local absl::Status t_open_status;

// Metadata reads are small and many (a superblock, object headers, B-tree
// nodes scattered through the file), and each field of a loader opens the
// file again: each becomes a ranged read of a whole aligned block, and the
// process keeps the most recently used blocks of every object (by URL and
// version, its identity's ETag hash, so a new version is read anew).
constexpr uint64_t kBlock = 256 * 1024;
constexpr size_t kBlocksKept = 64;  // 16 MiB

struct Block {
  std::string key;  // url, version
  uint64_t index = 0;
  uint64_t used = 0;  // when last read (a counter)
  std::vector<std::byte> bytes;
};

// Guarded by the HDF5 lock: every caller holds it.
struct BlockCache {
  std::vector<Block> blocks;
  uint64_t tick = 0;
};
BlockCache& block_cache() {
  static BlockCache* cache = new BlockCache();  // never destroyed: used until exit
  return *cache;
}

struct ObjectFile {
  H5FD_t pub;  // first: libhdf5 casts between the two
  std::string url;
  std::string key;  // url, version
  File file;        // the object's ranged reads (File::read_exact)
  uint64_t size = 0;
  haddr_t eoa = 0;
};

ObjectFile* of(H5FD_t* f) { return reinterpret_cast<ObjectFile*>(f); }
const ObjectFile* of(const H5FD_t* f) { return reinterpret_cast<const ObjectFile*>(f); }

void push_error(const char* func, hid_t major, hid_t minor, const std::string& what) {
  H5Epush2(H5E_DEFAULT, __FILE__, func, __LINE__, H5E_ERR_CLS, major, minor, "%s", what.c_str());
}

absl::StatusOr<const Block*> block(const ObjectFile& f, uint64_t index) {
  BlockCache& c = block_cache();
  ++c.tick;
  for (Block& b : c.blocks) {
    if (b.index == index && b.key == f.key) {
      b.used = c.tick;
      return &b;
    }
  }
  Block* slot = nullptr;
  if (c.blocks.size() < kBlocksKept) {
    slot = &c.blocks.emplace_back();
  } else {
    slot = &*std::min_element(c.blocks.begin(), c.blocks.end(),
                              [](const Block& a, const Block& b) { return a.used < b.used; });
  }
  const uint64_t at = index * kBlock;
  slot->key.clear();  // no object's until its bytes are in
  slot->used = c.tick;
  slot->bytes.resize(static_cast<size_t>(std::min(kBlock, f.size - at)));
  if (absl::Status s = f.file.read_exact(at, slot->bytes, "HDF5 metadata"); !s.ok()) {
    slot->bytes.clear();
    return s;
  }
  slot->key = f.key;
  slot->index = index;
  return slot;
}

// [addr, addr + n) into buf: whole blocks kept for small reads, one ranged
// read for a large one; past the object's end, zeros (as libhdf5's own
// drivers give past end of file).
absl::Status read_into(const ObjectFile& f, uint64_t addr, size_t n, std::byte* buf) {
  const uint64_t in_object = addr >= f.size ? 0 : std::min<uint64_t>(n, f.size - addr);
  std::memset(buf + in_object, 0, n - in_object);
  if (in_object >= kBlock) return f.file.read_exact(addr, std::span<std::byte>(buf, in_object), "HDF5 data");
  uint64_t done = 0;
  while (done < in_object) {
    const uint64_t at = addr + done;
    absl::StatusOr<const Block*> b = block(f, at / kBlock);
    if (!b.ok()) return b.status();
    const uint64_t from = at % kBlock;
    const uint64_t take = std::min<uint64_t>(in_object - done, (*b)->bytes.size() - from);
    std::memcpy(buf + done, (*b)->bytes.data() + from, take);
    done += take;
  }
  return absl::OkStatus();
}

// The object named `url`, as the driver reads it.
absl::StatusOr<ObjectFile> describe(const std::string& url) {
  DLFEED_ASSIGN_OR_RETURN(File file, File::open(url));
  ObjectFile f;
  f.url = url;
  f.key = absl::StrCat(url, "\n", file.identity().inode);  // the ETag's hash (object_identity)
  f.size = file.size();
  f.file = std::move(file);
  return f;
}

#if !H5_VERSION_GE(1, 12, 0)
// The driver's callbacks and class, for libhdf5 1.10's driver interface (the one
// Debian ships); later versions changed the struct, and are refused in
// file_access_for.
H5FD_t* open_object(const char* name, unsigned flags, hid_t /*fapl*/, haddr_t maxaddr) {
  t_open_status = absl::OkStatus();
  if ((flags & (H5F_ACC_RDWR | H5F_ACC_CREAT | H5F_ACC_TRUNC | H5F_ACC_EXCL)) != 0) {
    t_open_status = absl::InvalidArgumentError(absl::StrCat(name, ": objects of a store are opened read-only"));
    push_error(__func__, H5E_VFL, H5E_CANTOPENFILE, std::string(t_open_status.message()));
    return nullptr;
  }
  if (!is_object_url(name)) {
    // A file an object names (an external link's target) is read from the
    // store only: libhdf5 also tries the name in the working directory,
    // where another file of that name would be read in silence.
    t_open_status = absl::NotFoundError(absl::StrCat(name,
                                                     ": not an object of a store (a file an object names is "
                                                     "read from the store, beside the object)"));
    push_error(__func__, H5E_VFL, H5E_CANTOPENFILE, std::string(t_open_status.message()));
    return nullptr;
  }
  absl::StatusOr<ObjectFile> described = describe(name);
  if (!described.ok()) {
    t_open_status = described.status();  // the store's own code and message
    push_error(__func__, H5E_VFL, H5E_CANTOPENFILE, std::string(t_open_status.message()));
    return nullptr;
  }
  auto* f = new (std::nothrow) ObjectFile(std::move(*described));
  if (f == nullptr) return nullptr;
  std::memset(&f->pub, 0, sizeof(f->pub));
  f->pub.maxaddr = maxaddr;
  return &f->pub;
}

herr_t close_object(H5FD_t* file) {
  delete of(file);
  return 0;
}

int compare(const H5FD_t* a, const H5FD_t* b) {
  const int c = of(a)->key.compare(of(b)->key);  // another version of an object is another file
  return c < 0 ? -1 : (c > 0 ? 1 : 0);
}

herr_t query(const H5FD_t* /*file*/, unsigned long* flags) {
  // Raw data reads of the library (the fallback's H5Dread) go through its
  // sieve buffer: fewer, larger ranged reads.
  if (flags != nullptr) *flags = H5FD_FEAT_DATA_SIEVE;
  return 0;
}

haddr_t get_eoa(const H5FD_t* file, H5FD_mem_t /*type*/) { return of(file)->eoa; }
herr_t set_eoa(H5FD_t* file, H5FD_mem_t /*type*/, haddr_t addr) {
  of(file)->eoa = addr;
  return 0;
}
haddr_t get_eof(const H5FD_t* file, H5FD_mem_t /*type*/) { return of(file)->size; }

herr_t get_handle(H5FD_t* file, hid_t /*fapl*/, void** handle) {
  if (handle == nullptr) return -1;
  *handle = file;
  return 0;
}

herr_t read(H5FD_t* file, H5FD_mem_t /*type*/, hid_t /*dxpl*/, haddr_t addr, size_t size, void* buf) {
  ObjectFile& f = *of(file);
  if (addr == HADDR_UNDEF || buf == nullptr) {
    push_error(__func__, H5E_ARGS, H5E_BADVALUE, absl::StrCat(f.url, ": a read at an undefined address"));
    return -1;
  }
  if (absl::Status s = read_into(f, addr, size, static_cast<std::byte*>(buf)); !s.ok()) {
    push_error(__func__, H5E_IO, H5E_READERROR, std::string(s.message()));
    return -1;
  }
  return 0;
}

herr_t write(H5FD_t* file, H5FD_mem_t /*type*/, hid_t /*dxpl*/, haddr_t /*addr*/, size_t /*size*/,
             const void* /*buf*/) {
  push_error(__func__, H5E_IO, H5E_WRITEERROR, absl::StrCat(of(file)->url, ": objects of a store are read-only"));
  return -1;
}

herr_t truncate(H5FD_t* /*file*/, hid_t /*dxpl*/, hbool_t /*closing*/) { return 0; }

const H5FD_class_t kObjectDriver = {
    "dlfeed_object",                  // name
    static_cast<haddr_t>(INT64_MAX),  // maxaddr
    H5F_CLOSE_WEAK,                   // fc_degree
    nullptr,                          // terminate
    nullptr,                          // sb_size
    nullptr,                          // sb_encode
    nullptr,                          // sb_decode
    0,                                // fapl_size
    nullptr,                          // fapl_get
    nullptr,                          // fapl_copy
    nullptr,                          // fapl_free
    0,                                // dxpl_size
    nullptr,                          // dxpl_copy
    nullptr,                          // dxpl_free
    open_object,
    close_object,
    compare,
    query,
    nullptr,  // get_type_map
    nullptr,  // alloc
    nullptr,  // free
    get_eoa,
    set_eoa,
    get_eof,
    get_handle,
    read,
    write,
    nullptr,  // flush
    truncate,
    nullptr,  // lock
    nullptr,  // unlock
    H5FD_FLMAP_DICHOTOMY,
};
#endif

}  // namespace

absl::Status object_open_error() { return t_open_status; }

absl::Status read_object(const std::string& url, uint64_t offset, std::span<std::byte> out) {
  DLFEED_ASSIGN_OR_RETURN(ObjectFile f, describe(url));
  if (offset > f.size || out.size() > f.size - offset) {
    return absl::DataLossError(absl::StrCat(url, ": offset ", offset, ": expected ", out.size(),
                                            " bytes of the object of ", f.size, " bytes, found its end"));
  }
  return read_into(f, offset, out.size(), out.data());
}

absl::StatusOr<Hid> file_access_for(const std::string& path) {
  Hid fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  if (!fapl.ok()) return absl::InternalError(absl::StrCat(path, ": libhdf5 made no file-access property list"));
  if (!is_object_url(path)) {
#if H5_VERSION_GE(1, 10, 7)
    H5Pset_file_locking(fapl.get(), true, true);  // do not fail on file systems without locks
#endif
    return fapl;
  }
#if H5_VERSION_GE(1, 12, 0)
  return absl::UnimplementedError(absl::StrCat(path, ": HDF5 objects of a store are read with libhdf5 1.10 (found ",
                                               H5_VERS_MAJOR, ".", H5_VERS_MINOR, ")"));
#else
  static const hid_t driver = H5FDregister(&kObjectDriver);
  if (driver < 0 || H5Pset_driver(fapl.get(), driver, nullptr) < 0) {
    return absl::InternalError(absl::StrCat(path, ": libhdf5 refused dlfeed's object driver: ", h5_errors()));
  }
  return fapl;
#endif
}

}  // namespace dlfeed::detail::h5
