#include "base/forward_observer.h"

namespace dsv41 {

ForwardObserver& ForwardObserver::None() {
  static ForwardObserver none;  // stateless: every hook is a no-op
  return none;
}

}  // namespace dsv41
