"""Providers: one module per provider, all implementing ``benchctl.provisioners.base.Provider``.

This package never imports benchctl. Cloud SDKs are imported lazily inside their module.
"""
