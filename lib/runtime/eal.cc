#include "runtime/eal.h"
