#include "models/checkpoint.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace pagoda {

namespace fs = std::filesystem;

namespace {

// Headers of real checkpoints are at most a few MB; anything far larger is
// a corrupt length field.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

TensorInfo parse_entry(const std::string& path, const std::string& name, const nlohmann::json& e,
                       const uint8_t* data, uint64_t data_size) {
  auto fail = [&](const std::string& why) {
    throw_input_error("{}: tensor '{}': {}", path, name, why);
  };
  if (!e.is_object()) fail("header entry is not an object");
  TensorInfo t;
  t.name = name;
  t.file = path;
  if (!e.contains("dtype") || !e["dtype"].is_string()) fail("missing dtype");
  if (!dtype_from_name(e["dtype"].get<std::string>(), &t.dtype)) {
    fail("unsupported dtype '" + e["dtype"].get<std::string>() + "'");
  }
  if (!e.contains("shape") || !e["shape"].is_array()) fail("missing shape");
  uint64_t numel = 1;
  for (const auto& d : e["shape"]) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0) fail("shape must hold non-negative integers");
    const auto dim = d.get<uint64_t>();
    if (dim != 0 && numel > (uint64_t{1} << 48) / dim) fail("shape is absurdly large");
    numel *= dim;
    t.shape.push_back(static_cast<int64_t>(dim));
  }
  const auto& off = e.contains("data_offsets") ? e["data_offsets"] : nlohmann::json();
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
      !off[1].is_number_unsigned()) {
    fail("data_offsets must be two non-negative integers");
  }
  const auto begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
  if (begin > end || end > data_size) {
    fail("data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
         "] outside the data section of " + std::to_string(data_size) + " bytes (truncated file?)");
  }
  if (end - begin != numel * dtype_size(t.dtype)) {
    fail("holds " + std::to_string(end - begin) + " bytes, but " + shape_str(t.shape) + " " +
         std::string(dtype_name(t.dtype)) + " needs " + std::to_string(numel * dtype_size(t.dtype)));
  }
  t.data = data + begin;
  t.nbytes = end - begin;
  return t;
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
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    throw_input_error("{}: cannot stat", path);
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    throw_input_error("{}: file is {} bytes, too short for a safetensors header", path, size);
  }
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) throw_input_error("{}: cannot mmap: {}", path, std::strerror(errno));
  f->map_ = map;
  f->map_size_ = size;

  const auto* bytes = static_cast<const uint8_t*>(map);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];  // little endian
  if (header_len > size - 8 || header_len > kMaxHeaderBytes) {
    throw_input_error("{}: header length {} exceeds the file size {} (truncated or not safetensors)",
                      path, header_len, size);
  }
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes + 8, bytes + 8 + header_len);
  } catch (const nlohmann::json::parse_error& e) {
    throw_input_error("{}: header is not valid JSON: {}", path, e.what());
  }
  if (!header.is_object()) throw_input_error("{}: header is not a JSON object", path);
  const uint8_t* data = bytes + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) throw_input_error("{}: __metadata__ is not an object", path);
      for (const auto& [k, v] : entry.items()) {
        if (v.is_string()) f->metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    f->tensors_.emplace(name, parse_entry(path, name, entry, data, data_size));
  }
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) munmap(map_, map_size_);
}

std::unique_ptr<Checkpoint> Checkpoint::open(const std::string& dir) {
  std::unique_ptr<Checkpoint> c(new Checkpoint());
  c->dir_ = dir;
  const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  const fs::path single_path = fs::path(dir) / "model.safetensors";

  auto add_file = [&](const fs::path& p) -> SafetensorsFile& {
    c->files_.push_back(SafetensorsFile::open(p.string()));
    return *c->files_.back();
  };

  if (fs::exists(index_path)) {
    nlohmann::json index;
    try {
      std::ifstream in(index_path);
      index = nlohmann::json::parse(in);
    } catch (const nlohmann::json::parse_error& e) {
      throw_input_error("{}: invalid JSON: {}", index_path.string(), e.what());
    }
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
      throw_input_error("{}: missing \"weight_map\" object", index_path.string());
    }
    std::map<std::string, SafetensorsFile*> shards;
    for (const auto& [tensor, shard] : index["weight_map"].items()) {
      if (!shard.is_string()) throw_input_error("{}: weight_map['{}'] is not a file name", index_path.string(), tensor);
      const std::string shard_name = shard.get<std::string>();
      if (shard_name.find('/') != std::string::npos) {
        throw_input_error("{}: shard name '{}' must be a plain file name", index_path.string(), shard_name);
      }
      if (!shards.count(shard_name)) {
        const fs::path p = fs::path(dir) / shard_name;
        if (!fs::exists(p)) {
          throw_input_error("{}: shard '{}' (holding tensor '{}') does not exist", index_path.string(),
                            shard_name, tensor);
        }
        shards[shard_name] = &add_file(p);
      }
      const auto& tensors = shards[shard_name]->tensors();
      const auto it = tensors.find(tensor);
      if (it == tensors.end()) {
        throw_input_error("{}: tensor '{}' is listed in shard '{}' but not stored there",
                          index_path.string(), tensor, shard_name);
      }
      c->index_[tensor] = &it->second;
    }
    return c;
  }

  std::vector<fs::path> paths;
  if (fs::exists(single_path)) {
    paths.push_back(single_path);
  } else if (fs::is_directory(dir)) {
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().extension() == ".safetensors") paths.push_back(e.path());
    }
    std::sort(paths.begin(), paths.end());
  }
  if (paths.empty()) throw_input_error("{}: no model.safetensors or *.safetensors files", dir);
  for (const fs::path& p : paths) {
    SafetensorsFile& f = add_file(p);
    for (const auto& [name, info] : f.tensors()) {
      if (!c->index_.emplace(name, &info).second) {
        throw_input_error("{}: tensor '{}' appears in more than one file", dir, name);
      }
    }
  }
  return c;
}

bool Checkpoint::has(const std::string& name) const { return index_.count(name) > 0; }

const TensorInfo& Checkpoint::get(const std::string& name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) throw_input_error("checkpoint {}: missing tensor '{}'", dir_, name);
  return *it->second;
}

const TensorInfo& Checkpoint::get(const std::string& name, const std::vector<int64_t>& shape) const {
  const TensorInfo& t = get(name);
  if (t.dtype != DType::F32 && t.dtype != DType::BF16 && t.dtype != DType::F16) {
    throw_input_error("checkpoint {}: tensor '{}' has dtype {}, expected F32, BF16 or F16", dir_, name,
                      dtype_name(t.dtype));
  }
  if (t.shape != shape) {
    throw_input_error("checkpoint {}: tensor '{}' has shape {}, expected {}", dir_, name,
                      shape_str(t.shape), shape_str(shape));
  }
  return t;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, _] : index_) out.push_back(name);
  return out;
}

}  // namespace pagoda
