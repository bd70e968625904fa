"""Importers: read other tools' trace formats into typed records and draftsim trace bundles."""
