// Helpers shared by the checkpoint and config tests: scratch directories,
// raw file I/O, a minimal safetensors writer and an InputError matcher.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"

namespace pagoda::test {

namespace fs = std::filesystem;

inline const std::string kStories = PAGODA_MODELS_DIR "/stories260k";
inline const std::string kStoriesBf16 = PAGODA_TEST_DATA_DIR "/stories260k-bf16";

// A fresh directory under $TMPDIR, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "pagoda_models_test_XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string str() const { return path_.string(); }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

// A checkpoint written by tools/make_tiny_checkpoint.py (ARGS) under tmp.
inline std::string tiny_checkpoint(const TempDir& tmp, const std::string& args) {
  const std::string dir = (tmp / "tiny").string();
  const std::string cmd = "/usr/bin/python3 " PAGODA_SOURCE_DIR
                          "/tools/make_tiny_checkpoint.py --out " +
                          dir + " " + args + " > /dev/null";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return dir;
}

inline std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + p.string());
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void write_file(const fs::path& p, const std::string& data) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << data;
  if (!out) throw std::runtime_error("cannot write " + p.string());
}

// Safetensors bytes: little-endian u64 header length, header, data.
inline std::string safetensors_bytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}
inline std::string safetensors_bytes(const nlohmann::json& header, const std::string& data) {
  return safetensors_bytes(header.dump(), data);
}

// Builds a safetensors file tensor by tensor, packing data back to back.
class SafetensorsWriter {
 public:
  void add(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape,
           const void* data, size_t nbytes) {
    header_[name] = {{"dtype", dtype},
                     {"shape", shape},
                     {"data_offsets", {blob_.size(), blob_.size() + nbytes}}};
    blob_.append(static_cast<const char*>(data), nbytes);
  }
  // header_multiple 8: the header padded with spaces as the safetensors
  // library writes it, so the data start 8-byte aligned in a mapping.
  void write(const fs::path& p, size_t header_multiple = 1) const {
    std::string header = header_.dump();
    header.resize((header.size() + header_multiple - 1) / header_multiple * header_multiple, ' ');
    write_file(p, safetensors_bytes(header, blob_));
  }

 private:
  nlohmann::json header_ = nlohmann::json::object();
  std::string blob_;
};

// Runs fn; it must throw InputError whose message contains every needle.
template <typename Fn>
void expect_input_error(Fn&& fn, const std::vector<std::string>& needles) {
  try {
    fn();
    ADD_FAILURE() << "expected an InputError mentioning '" << needles.at(0) << "'";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    for (const auto& n : needles)
      EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
  }
}

}  // namespace pagoda::test
