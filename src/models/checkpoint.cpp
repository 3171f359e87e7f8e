// Checkpoint: finds a model directory's safetensors files (index, single
// file, or a plain set of shards) and indexes their tensors by name.
#include "models/checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "models/json_fields.h"

namespace pagoda {

namespace fs = std::filesystem;

namespace {

std::string shape_str(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// model.safetensors.index.json: {"weight_map": {tensor: shard file}, ...}.
// Returns tensor -> shard, with shard names checked to be plain file names
// (an index must not reach outside its directory).
std::map<std::string, std::string> read_weight_map(const fs::path& index_path) {
  const std::string file = index_path.string();
  const nlohmann::json index = read_json_file(file);
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    throw_input_error("{}: missing \"weight_map\" object", file);
  }
  std::map<std::string, std::string> out;
  for (const auto& [tensor, shard] : index["weight_map"].items()) {
    if (!shard.is_string()) {
      throw_input_error("{}: weight_map entry for tensor '{}' must be a file name, got {}", file,
                        tensor, describe_json(shard));
    }
    const std::string& name = shard.get_ref<const std::string&>();
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
      throw_input_error(
          "{}: weight_map entry for tensor '{}': shard '{}' must be a plain file name", file,
          tensor, name);
    }
    out.emplace(tensor, name);
  }
  if (out.empty()) throw_input_error("{}: weight_map is empty", file);
  return out;
}

}  // namespace

std::unique_ptr<Checkpoint> Checkpoint::open(const std::string& dir) {
  std::unique_ptr<Checkpoint> c(new Checkpoint());
  c->dir_ = dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw_input_error("checkpoint {}: not a directory", dir);
  const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  const fs::path single_path = fs::path(dir) / "model.safetensors";

  // Every tensor of every opened file must have one home, also in shards an
  // index does not list it under: a duplicate means a mixed-up directory.
  std::map<std::string, const std::string*> owner;
  auto add_file = [&](const fs::path& p) -> const SafetensorsFile& {
    c->files_.push_back(SafetensorsFile::open(p.string()));
    const SafetensorsFile& f = *c->files_.back();
    for (const auto& [name, info] : f.tensors()) {
      const auto [it, inserted] = owner.emplace(name, &info.file);
      if (!inserted) {
        throw_input_error("checkpoint {}: tensor '{}' is stored in both {} and {}", dir, name,
                          *it->second, info.file);
      }
    }
    return f;
  };

  if (fs::exists(index_path, ec)) {
    std::map<std::string, const SafetensorsFile*> shards;
    for (const auto& [tensor, shard] : read_weight_map(index_path)) {
      auto it = shards.find(shard);
      if (it == shards.end()) {
        const fs::path p = fs::path(dir) / shard;
        if (!fs::exists(p, ec)) {
          throw_input_error("{}: shard '{}' (holding tensor '{}') does not exist",
                            index_path.string(), shard, tensor);
        }
        it = shards.emplace(shard, &add_file(p)).first;
      }
      const auto& tensors = it->second->tensors();
      const auto t = tensors.find(tensor);
      if (t == tensors.end()) {
        throw_input_error("{}: tensor '{}' is listed in shard '{}' but not stored there",
                          index_path.string(), tensor, shard);
      }
      c->index_[tensor] = &t->second;
    }
    return c;
  }

  std::vector<fs::path> paths;
  if (fs::exists(single_path, ec)) {
    paths.push_back(single_path);
  } else {
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      if (e.path().extension() == ".safetensors") paths.push_back(e.path());
    }
    std::sort(paths.begin(), paths.end());  // a stable order for error messages
  }
  if (paths.empty()) {
    throw_input_error(
        "checkpoint {}: no model.safetensors.index.json, model.safetensors or *.safetensors", dir);
  }
  for (const fs::path& p : paths) {
    for (const auto& [name, info] : add_file(p).tensors()) c->index_[name] = &info;
  }
  return c;
}

bool Checkpoint::has(const std::string& name) const { return index_.count(name) > 0; }

const TensorInfo& Checkpoint::get(const std::string& name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) throw_input_error("checkpoint {}: missing tensor '{}'", dir_, name);
  return *it->second;
}

const TensorInfo& Checkpoint::get(const std::string& name,
                                  const std::vector<int64_t>& shape) const {
  const TensorInfo& t = get(name);
  if (t.dtype != DType::F32 && t.dtype != DType::BF16 && t.dtype != DType::F16) {
    throw_input_error("checkpoint {}: tensor '{}' has dtype {}, expected F32, BF16 or F16", dir_,
                      name, dtype_name(t.dtype));
  }
  if (t.shape != shape) {
    throw_input_error("checkpoint {}: tensor '{}' has shape {}, expected {}", dir_, name,
                      shape_str(t.shape), shape_str(shape));
  }
  return t;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto& [name, _] : index_) out.push_back(name);
  return out;
}

}  // namespace pagoda
