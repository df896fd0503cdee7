// The CopilotKit page the AG-UI browser test builds (`vite build --outDir <tmp>`), served from an
// origin other than the gateway's: its calls to /agui are cross-origin (TETHER_AGUI_CORS_ORIGINS).
import react from "@vitejs/plugin-react";
import { defineConfig } from "vite";

export default defineConfig({
  root: import.meta.dirname,
  base: "./",
  plugins: [react()],
  logLevel: "warn",
  build: { emptyOutDir: true, sourcemap: false, chunkSizeWarningLimit: 8000 },
});
