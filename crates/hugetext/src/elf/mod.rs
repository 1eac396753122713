//! ELF: PMD-mapping eligibility (`check`), the safe rewriter (`align`) and
//! DT_NEEDED resolution the way ld.so does it (`deps`).
