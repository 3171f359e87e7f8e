// Safetensors checkpoints: one file or shards listed in
// model.safetensors.index.json, memory-mapped read-only. Tensors are views
// into the mapping (no copy).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace pagoda {

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // inside the file mapping
  size_t nbytes = 0;
  std::string file;  // file it lives in, for error messages
  int64_t numel() const;
};

// One mapped .safetensors file. Validates the header completely on open:
// 8-byte length within the file, header is a JSON object, every entry has a
// known dtype, a shape of non-negative ints and data_offsets that lie inside
// the data section and match dtype size x numel. Throws InputError naming the
// file (and tensor) and the reason.
class SafetensorsFile {
 public:
  static std::unique_ptr<SafetensorsFile> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a model directory.
class Checkpoint {
 public:
  // DIR/model.safetensors.index.json (shards) or DIR/model.safetensors or,
  // failing both, every DIR/*.safetensors. Throws InputError if none, or if
  // the index names a missing shard or a tensor absent from its shard.
  static std::unique_ptr<Checkpoint> open(const std::string& dir);

  bool has(const std::string& name) const;
  // Throws InputError "checkpoint DIR: missing tensor NAME".
  const TensorInfo& get(const std::string& name) const;
  // Also checks the shape and that the dtype is F32, BF16 or F16; throws
  // InputError naming the tensor, the expected and the actual shape/dtype.
  const TensorInfo& get(const std::string& name, const std::vector<int64_t>& shape) const;
  std::vector<std::string> names() const;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorInfo*> index_;
};

}  // namespace pagoda
