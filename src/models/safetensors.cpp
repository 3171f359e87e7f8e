// SafetensorsFile: maps a .safetensors file and validates its header before
// any tensor pointer is handed out.
//
// Layout: u64 little-endian header length N, N bytes of JSON
//   {NAME: {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]},
//    "__metadata__": {str: str}}
// then the data section; offsets are relative to the data section start.
//
// Alignment: the format does not promise aligned tensor data (N need not be
// a multiple of 8), so TensorInfo::data may be misaligned for its dtype.
// Readers must use memcpy-style access or check alignment (WeightStore
// copies misaligned tensors once at load).
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/checkpoint.h"

namespace pagoda {

namespace {

// Real headers are at most a few MB; a larger length is a corrupt field,
// and parsing it would cost a lot of memory for nothing.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
// No single tensor is anywhere near 2^48 elements; the cap keeps every
// product below (numel x dtype size) far from overflowing 64 bits.
constexpr uint64_t kMaxElements = uint64_t{1} << 48;

struct Span {
  uint64_t begin, end;
  const std::string* name;
};

std::string shape_str(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

TensorInfo parse_entry(const std::string& path, const std::string& name, const nlohmann::json& e,
                       const uint8_t* data, uint64_t data_size) {
  auto fail = [&](const std::string& why) {
    throw_input_error("{}: tensor '{}': {}", path, name, why);
  };
  if (!e.is_object()) fail("header entry is not a JSON object");
  TensorInfo t;
  t.name = name;
  t.file = path;

  const auto dtype = e.find("dtype");
  if (dtype == e.end() || !dtype->is_string()) fail("missing dtype (a string such as \"F32\")");
  if (!dtype_from_name(dtype->get_ref<const std::string&>(), &t.dtype)) {
    fail(fmt::format(
        "unsupported dtype {} (supported: F32, BF16, F16, I8, U8, I32, I64, F8_E4M3, F8_E8M0)",
        dtype->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)));
  }

  const auto shape = e.find("shape");
  if (shape == e.end() || !shape->is_array())
    fail("missing shape (a list of non-negative integers)");
  uint64_t numel = 1;
  for (const auto& d : *shape) {
    // Non-negative JSON integers are stored unsigned; anything else
    // (negative, fractional, not a number) is refused.
    if (!d.is_number_unsigned()) fail("shape must be a list of non-negative integers");
    const uint64_t dim = d.get<uint64_t>();
    if (dim > kMaxElements || (dim != 0 && numel > kMaxElements / dim)) {
      fail("shape has an absurdly large number of elements");
    }
    numel *= dim;
    t.shape.push_back(static_cast<int64_t>(dim));
  }

  const auto off = e.find("data_offsets");
  if (off == e.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned()) {
    fail("data_offsets must be two non-negative integers [begin, end]");
  }
  const uint64_t begin = (*off)[0].get<uint64_t>(), end = (*off)[1].get<uint64_t>();
  if (begin > end) fail(fmt::format("data_offsets [{}, {}] have begin after end", begin, end));
  if (end > data_size) {
    fail(fmt::format(
        "data_offsets [{}, {}] lie outside the data section of {} bytes (truncated file?)", begin,
        end, data_size));
  }
  const uint64_t need = numel * dtype_size(t.dtype);
  if (end - begin != need) {
    fail(fmt::format("data_offsets [{}, {}] hold {} bytes, but shape {} of {} needs {}", begin, end,
                     end - begin, shape_str(t.shape), dtype_name(t.dtype), need));
  }
  t.data = data + begin;
  t.nbytes = static_cast<size_t>(need);
  return t;
}

// Two tensors sharing bytes would make one's writes (or conversions) the
// other's data; the format never produces that, so it marks a forged file.
void check_no_overlap(const std::string& path, std::vector<Span>& spans) {
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].begin < spans[i - 1].end) {
      throw_input_error("{}: tensor '{}': data_offsets overlap those of tensor '{}'", path,
                        *spans[i].name, *spans[i - 1].name);
    }
  }
}

// Maps the file read-only at a 2 MiB-aligned address. Fault-around maps the
// 64 KiB-aligned window of addresses around a faulting page, so where the
// mapping starts decides which neighbouring tensors' pages a read brings in
// (and keeps resident after the loader drops the tensors it copied): a
// mapping the kernel happens to align (it does for large files, qemu-user
// does not) left ~2x the checkpoint pages resident of an aligned one.
void* map_at_2mib_boundary(int fd, uint64_t size) {
  constexpr uint64_t kAlign = uint64_t{2} << 20;
  void* reserved = mmap(nullptr, size + kAlign, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (reserved == MAP_FAILED) return mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const auto base = reinterpret_cast<uintptr_t>(reserved);
  const uintptr_t aligned = (base + kAlign - 1) / kAlign * kAlign;
  void* map =
      mmap(reinterpret_cast<void*>(aligned), size, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0);
  if (map == MAP_FAILED) {
    const int mmap_errno = errno;
    munmap(reserved, size + kAlign);
    errno = mmap_errno;
    return MAP_FAILED;
  }
  // Give back the reservation around the mapping (page-rounded ends).
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t end = (aligned + size + page - 1) / page * page,
                  reserved_end = base + size + kAlign;
  if (aligned > base) munmap(reserved, aligned - base);
  if (reserved_end > end) munmap(reinterpret_cast<void*>(end), reserved_end - end);
  return map;
}

}  // namespace

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_input_error("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw_input_error("{}: not a regular file", path);
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    throw_input_error("{}: file is {} bytes, too short for a safetensors header", path, size);
  }
  void* map = map_at_2mib_boundary(fd, size);
  const int mmap_errno = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (map == MAP_FAILED) throw_input_error("{}: cannot mmap: {}", path, std::strerror(mmap_errno));
  f->map_ = map;  // from here on the destructor unmaps, also when we throw
  f->map_size_ = size;

  const auto* bytes = static_cast<const uint8_t*>(map);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  if (header_len > size - 8) {
    throw_input_error(
        "{}: header length {} exceeds the file size {} (truncated or not safetensors)", path,
        header_len, size);
  }
  if (header_len > kMaxHeaderBytes) {
    throw_input_error("{}: header length {} is absurdly large (limit {})", path, header_len,
                      kMaxHeaderBytes);
  }

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes + 8, bytes + 8 + header_len);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e999
    throw_input_error("{}: header is not valid JSON: {}", path, e.what());
  }
  if (!header.is_object()) throw_input_error("{}: header is not a JSON object", path);

  const uint8_t* data = bytes + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  std::vector<Span> spans;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) throw_input_error("{}: __metadata__ is not a JSON object", path);
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string())
          throw_input_error("{}: __metadata__ value '{}' is not a string", path, k);
        f->metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    const TensorInfo& t =
        f->tensors_.insert_or_assign(name, parse_entry(path, name, entry, data, data_size))
            .first->second;
    const auto begin = static_cast<uint64_t>(static_cast<const uint8_t*>(t.data) - data);
    if (t.nbytes > 0) spans.push_back({begin, begin + t.nbytes, &t.name});
  }
  check_no_overlap(path, spans);
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) munmap(map_, map_size_);
}

}  // namespace pagoda
