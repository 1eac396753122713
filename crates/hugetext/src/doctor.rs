//! `doctor`: what the running kernel can do for huge text, and what each
//! finding means for the user.
