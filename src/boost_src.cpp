// Debian's Boost 1.81 ships Boost.URL and Boost.JSON header-only: compile its sources once here.
#include <boost/url/src.hpp>
#include <boost/json/src.hpp>
