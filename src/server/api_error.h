// OpenAI-style errors: {"error": {"message", "type", "param", "code"}} with
// the HTTP status they travel with.
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace pagoda::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string type, std::string message, std::string param = "")
      : std::runtime_error(message),
        status_(status),
        type_(std::move(type)),
        param_(std::move(param)) {}
  int status() const { return status_; }
  nlohmann::json body() const;

 private:
  int status_;
  std::string type_;
  std::string param_;
};

// 400 invalid_request_error naming the offending parameter.
inline ApiError bad_request(const std::string& message, const std::string& param = "") {
  return ApiError(400, "invalid_request_error", message, param);
}

}  // namespace pagoda::server
