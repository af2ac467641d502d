#include "server/generation_request.h"

namespace dsv41 {

bool ServedModel::Serves(const std::string& name) const {
  if (name.empty()) return true;
  for (const std::string& n : names) {
    if (n == name) return true;
  }
  return false;
}

}  // namespace dsv41
