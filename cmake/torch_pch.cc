// Owner of the precompiled LibTorch header that relax/, search/, runtime/ and the tests reuse
// (LibTorch headers take most of this project's compile time).
