# CMake options of the README commands' builds, sourced by scripts/demo.sh,
# scripts/test.sh and tests/e2e/test_readme_commands.sh, so the test checks
# exactly what the commands configure. Both commands build into build/ (the
# README's "Using it" runs ./build/pagoda after either), so each states its
# options outright: a cache left by the other command must not decide them
# (the demo's PAGODA_BUILD_TESTS=OFF once made the test command's Release
# stage find no tests and still pass).
PAGODA_DEMO_CMAKE_ARGS=(-DPAGODA_BUILD_TESTS=OFF)
PAGODA_TEST_CMAKE_ARGS=(-DPAGODA_BUILD_TESTS=ON)
