#include "server/api_error.h"

namespace pagoda::server {

nlohmann::json ApiError::body() const {
  nlohmann::json err = {{"message", what()}, {"type", type_}, {"code", status_}};
  err["param"] = param_.empty() ? nlohmann::json() : nlohmann::json(param_);
  return {{"error", err}};
}

}  // namespace pagoda::server
