"""FormatRewriteRule scripts shipped with the project (ell, bsr, hyb, ...)."""
